"""The JAX engine on several devices and processes: JAX's own runtime, no launcher of ours.

**One process per host** drives all of its devices (JAX's multi-controller model). One host:
one process over ``run.gpus`` local devices ("jax-local"). Several hosts: the same program is
started once per host, and ``jax.distributed.initialize`` joins them before JAX touches a
device ("jax.distributed"). The environment says which (``distributed_args``):

- ``PARALLAX_NUM_PROCESSES`` > 1 (a hand-started launch, ``scripts/multinode/hand_start.sh jax``):
  ``JAX_COORDINATOR_ADDRESS`` (JAX's own variable: host:port of process 0) and
  ``PARALLAX_PROCESS_ID`` (0 .. count-1); JAX's cluster detection is switched off. JAX itself
  reads no variables for the process count and id outside a cluster manager, hence ours.
- else a Slurm step of several tasks (``SLURM_NTASKS`` > 1 under ``srun``, ``scripts/multinode/slurm_jax.sbatch``):
  JAX's Slurm detection gives the coordinator (the step's first node; ``JAX_COORDINATOR_ADDRESS``
  wins), the count (``SLURM_NTASKS``) and the id (``SLURM_PROCID``). JAX would then keep one
  GPU per task (``SLURM_LOCALID``); Parallax gives each task its ``gpus / processes`` GPUs
  instead (``local_gpus``; ``JAX_LOCAL_DEVICE_IDS``, JAX's own, wins).
- else one process.

``run.gpus`` is the GLOBAL device count: with several processes it is every device of every
process, the same ``--gpus`` on every host, ``gpus / processes`` devices each. With
``--device cpu`` the devices are XLA:CPU devices (``--xla_force_host_platform_device_count``,
set here before JAX starts) and the processes' collectives are gloo's
(``jax_cpu_collectives_implementation``): the CPU test lab of the same code.

**Sharding** (``Layout``): a ``Mesh`` over the devices, process-major, one axis ``data``. The
global batch [run.global_batch, S+1] is ``NamedSharding(mesh, P("data"))``: device i holds rows
[i·b, (i+1)·b) (b the per-GPU batch), so a process holds the rows of its devices, contiguous,
which ``data.source.make_batch_source(run, rank=process_index, world=process_count)`` yields.
Parameters and optimizer state are replicated ("ddp") or sharded FSDP-style ("fsdp": each
array along its largest dimension that the device count divides; arrays with no such dimension,
and scalars, stay replicated, ``Layout.replicated_names``). The recipe's extra collections
(Flax fp8 amax histories and scales, the emulated NVFP4 step counters) are small and always
replicated. XLA (GSPMD) inserts every collective: the gradient all-reduce (ddp), the parameter
all-gathers and gradient reduce-scatters (fsdp: the step gathers each whole parameter, and its
gradient comes back sharded), the global max of the fp8 amaxes. The program is the 1-device
program, so its loss is the 1-device loss up to the order of floating-point sums.

One device and one process is the path of old (``Layout.mesh`` None): committed single-device
arrays, no shardings given to jit, the same compiled step as before this module existed.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

import numpy as np

from parallax.errors import ParallaxError
from parallax.plan.world import NUM_PROCESSES_ENV, SLURM_STEP_ENV, int_env, process_count_from_env

AXIS = "data"
PROCESS_ID_ENV = "PARALLAX_PROCESS_ID"
COORDINATOR_ENV = "JAX_COORDINATOR_ADDRESS"
LOCAL_DEVICE_IDS_ENV = "JAX_LOCAL_DEVICE_IDS"
CPU_COUNT_FLAG = "--xla_force_host_platform_device_count"
# jax.distributed's timeouts, in seconds: how long the processes wait for each other to join;
# how long a process may miss heartbeats (it was killed, its host died) before the others are
# terminated; how long an ending process waits at the shutdown barrier for the others. A
# process that fails with an error ends normally and reaches that barrier while the others
# wait inside a collective for it: when the barrier times out, JAX's coordination service
# terminates every process. So a failure ends the whole run about SHUTDOWN_TIMEOUT_S after
# it (JAX's defaults: 100 and 300 s); a process that ends well reaches the barrier within
# seconds of the others (the run's last collectives align them).
INIT_TIMEOUT_S, HEARTBEAT_TIMEOUT_S, SHUTDOWN_TIMEOUT_S = 300, 60, 60


# ---- processes ------------------------------------------------------------------------------

def distributed_args(gpus: int, environ=None) -> dict | None:
    """The keyword arguments of ``jax.distributed.initialize`` for this run, or None for one
    process (see the module docstring for the variables)."""
    environ = os.environ if environ is None else environ
    count = process_count_from_env(environ)
    if count == 1:
        return None
    if gpus % count:
        raise ParallaxError(f"--gpus {gpus} does not split over {count} processes: give every process the same "
                            f"number of devices (--gpus counts all devices of all processes)")
    per_process = gpus // count
    args = {"initialization_timeout": INIT_TIMEOUT_S, "heartbeat_timeout_seconds": HEARTBEAT_TIMEOUT_S,
            "shutdown_timeout_seconds": SHUTDOWN_TIMEOUT_S, "local_device_ids": local_gpus(per_process, environ)}
    if environ.get(NUM_PROCESSES_ENV):
        if not environ.get(COORDINATOR_ENV):
            raise ParallaxError(f"{NUM_PROCESSES_ENV}={count} needs {COORDINATOR_ENV}=host:port of process 0")
        if not environ.get(PROCESS_ID_ENV):
            raise ParallaxError(f"{NUM_PROCESSES_ENV}={count} needs {PROCESS_ID_ENV} (0 .. {count - 1}) "
                                "in every process")
        index = int_env(environ, PROCESS_ID_ENV)
        if not 0 <= index < count:
            raise ParallaxError(f"{PROCESS_ID_ENV}={index} is outside 0 .. {count - 1}")
        args.update(coordinator_address=environ[COORDINATOR_ENV], num_processes=count, process_id=index,
                    cluster_detection_method="deactivate")
    # Under Slurm, JAX detects the coordinator, the count and the id itself.
    return args


def local_gpus(per_process: int, environ) -> list[int]:
    """The GPUs (CUDA ordinals after CUDA_VISIBLE_DEVICES) of this process: ``JAX_LOCAL_DEVICE_IDS``
    (JAX's own variable) if set; in a Slurm step whose task was not bound to exactly its GPUs
    (``--gpus-per-task``), the task with local id L takes [L·k, (L+1)·k), as JAX's
    one-GPU-per-task default does for k = 1; else the first k. (XLA:CPU ignores them.)"""
    if environ.get(LOCAL_DEVICE_IDS_ENV):
        try:
            return [int(x) for x in environ[LOCAL_DEVICE_IDS_ENV].split(",")]
        except ValueError:
            raise ParallaxError(f"{LOCAL_DEVICE_IDS_ENV}={environ[LOCAL_DEVICE_IDS_ENV]!r} is not a list of "
                                "integers") from None
    visible = [v for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    first = 0
    if not environ.get(NUM_PROCESSES_ENV) and len(visible) != per_process:
        first = int_env(environ, "SLURM_LOCALID") * per_process
    return list(range(first, first + per_process))


def launch_kind(environ=None) -> str:
    """Which environment started the processes: "PARALLAX_NUM_PROCESSES", "slurm" or "single"."""
    environ = os.environ if environ is None else environ
    if environ.get(NUM_PROCESSES_ENV) and process_count_from_env(environ) > 1:
        return NUM_PROCESSES_ENV
    return "slurm" if process_count_from_env(environ) > 1 else "single"


def _jax_started() -> bool:
    import sys

    jax = sys.modules.get("jax")
    bridge = getattr(getattr(jax, "_src", None), "xla_bridge", None)
    return bridge is not None and bridge.backends_are_initialized()


def cpu_device_flag(count: int) -> None:
    """Ask XLA:CPU for ``count`` devices (before JAX starts; a count the user set wins if it is
    enough). A process whose JAX already runs with fewer is a one-line error."""
    if count <= 1:
        return
    current = os.environ.get("XLA_FLAGS", "")
    given = [f for f in current.split() if f.startswith(CPU_COUNT_FLAG + "=")]
    if _jax_started():
        import jax

        have = len(jax.local_devices(backend="cpu"))
        if have < count:
            raise ParallaxError(f"--gpus on the CPU needs {count} CPU devices in this process but JAX already "
                                f"started with {have}; set XLA_FLAGS={CPU_COUNT_FLAG}={count} before starting Python")
        return
    if given:
        if int(given[-1].partition("=")[2] or 0) >= count:
            return
        current = " ".join(f for f in current.split() if not f.startswith(CPU_COUNT_FLAG + "="))
    os.environ["XLA_FLAGS"] = f"{current} {CPU_COUNT_FLAG}={count}".strip()


def start(run) -> None:
    """Before JAX starts its backends: the CPU device count a CPU run needs, and the joining of
    several processes (``jax.distributed.initialize``, once per process)."""
    args = distributed_args(run.gpus)
    count = process_count_from_env() if args else 1
    if run.device.partition(":")[0] == "cpu":
        cpu_device_flag(run.gpus // count)
    if args is None:
        return
    import jax

    if jax.distributed.is_initialized():
        return
    if _jax_started():
        raise ParallaxError("a several-process JAX run must join its processes before JAX starts; "
                            "run it in a fresh process")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(**args)
    except Exception as exc:  # a coordinator that never answers, a port in use
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ParallaxError(f"jax.distributed.initialize failed ({launch_kind()}): {first[:300]}") from None


# ---- devices and shardings ---------------------------------------------------------------------

def platform_of(run) -> str:
    """The JAX platform of ``run.device``: "cpu", or "gpu"; "auto" is JAX's default backend."""
    import jax

    kind = run.device.partition(":")[0]
    if kind == "auto":
        return jax.devices()[0].platform
    return "cpu" if kind == "cpu" else "gpu"


def mesh_devices(run) -> list:
    """The ``run.gpus`` devices of the mesh, ordered by (process, local id)."""
    import jax

    kind, _, index = run.device.partition(":")
    if index:
        raise ParallaxError(f"--device {run.device} names one device; with --gpus {run.gpus} use --device "
                            f"{kind} (the first {run.gpus} devices; CUDA_VISIBLE_DEVICES picks which)")
    platform = platform_of(run)
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        raise ParallaxError(f"JAX sees no {platform} device; --gpus {run.gpus} needs {run.gpus}") from None
    processes = jax.process_count()
    if len(devices) < run.gpus:
        where = f" over {processes} processes" if processes > 1 else ""
        raise ParallaxError(f"--gpus {run.gpus}: JAX sees {len(devices)} {platform} device(s){where}; "
                            f"lower --gpus or use --gpus all")
    devices = sorted(devices, key=lambda d: (d.process_index, d.id))
    if processes > 1:
        if len(devices) != run.gpus:
            raise ParallaxError(f"--gpus {run.gpus}: the {processes} processes have {len(devices)} {platform} "
                                f"devices in all; with several processes --gpus counts every one of them")
        counts = {p: sum(d.process_index == p for d in devices) for p in range(processes)}
        if len(set(counts.values())) != 1:
            raise ParallaxError(f"the processes have unequal device counts {counts}; give each the same")
        return devices
    return devices[:run.gpus]


def fsdp_dim(shape: tuple[int, ...], n: int) -> int | None:
    """The dimension FSDP shards an array of ``shape`` along over ``n`` devices: its largest one
    that ``n`` divides (the first of equals), or None (the array stays replicated)."""
    candidates = [(size, -i) for i, size in enumerate(shape) if size % n == 0 and size >= n]
    if n <= 1 or not candidates:
        return None
    return -max(candidates)[1]


@dataclass
class Layout:
    """Where a run's arrays live: one device (``mesh`` None), or a mesh of several."""

    devices: list
    sharding: str = "ddp"
    global_batch: int = 0
    mesh: object = None
    rows: tuple[int, int] = (0, 0)  # this process's (first row, count) of the global batch
    replicated_names: list[str] = field(default_factory=list)  # fsdp: parameters left replicated

    @classmethod
    def of(cls, run, device) -> "Layout":
        """The layout of ``run``: ``device`` (``resolve_device``'s) on one device and process."""
        import jax

        if run.gpus == 1 and jax.process_count() == 1:
            return cls.one_device(run, device)
        from jax.sharding import Mesh

        devices = mesh_devices(run)
        mesh = Mesh(np.array(devices, dtype=object), (AXIS,))
        layout = cls(devices, run.sharding, run.global_batch, mesh)
        layout.rows = layout._process_rows(run.batch_size)
        return layout

    @classmethod
    def one_device(cls, run, device) -> "Layout":
        """The layout of a run on ``device`` alone."""
        return cls([device], run.sharding, run.global_batch, rows=(0, run.global_batch))

    @property
    def single(self) -> bool:
        return self.mesh is None

    @property
    def n(self) -> int:
        return len(self.devices)

    @property
    def local_devices(self) -> list:
        import jax

        return [d for d in self.devices if d.process_index == jax.process_index()]

    def _process_rows(self, batch_size: int) -> tuple[int, int]:
        """This process's rows of the global batch; they must be one contiguous block, in process
        order, for the data source's rank slice to be what the mesh expects."""
        import jax

        index = self.batch_sharding().addressable_devices_indices_map((self.global_batch, 2))
        starts = sorted(sl[0].start or 0 for sl in index.values())
        rows = len(starts) * batch_size
        expected = [jax.process_index() * rows + i * batch_size for i in range(len(starts))]
        if starts != expected:
            raise RuntimeError(f"the mesh gives this process rows {starts}, not the block {expected}")
        return expected[0], rows

    # shardings
    def batch_sharding(self):
        import jax
        from jax.sharding import NamedSharding, PartitionSpec

        if self.single:
            return jax.sharding.SingleDeviceSharding(self.devices[0])
        return NamedSharding(self.mesh, PartitionSpec(AXIS))

    def replicated(self):
        import jax
        from jax.sharding import NamedSharding, PartitionSpec

        if self.single:
            return jax.sharding.SingleDeviceSharding(self.devices[0])
        return NamedSharding(self.mesh, PartitionSpec())

    def state_sharding(self, shape: tuple[int, ...]):
        """The sharding of a parameter or optimizer-state array of ``shape``."""
        from jax.sharding import NamedSharding, PartitionSpec

        dim = fsdp_dim(tuple(shape), self.n) if self.sharding == "fsdp" and not self.single else None
        if dim is None:
            return self.replicated()
        spec = [None] * len(shape)
        spec[dim] = AXIS
        return NamedSharding(self.mesh, PartitionSpec(*spec))

    def state_shardings(self, tree):
        """``state_sharding`` of every leaf of ``tree`` (arrays or ShapeDtypeStructs)."""
        import jax

        return jax.tree.map(lambda a: self.state_sharding(np.shape(a)), tree)

    # placing host values
    def place(self, tree, shardings):
        """Host (NumPy) leaves of ``tree``, the same on every process, as global arrays."""
        import jax

        if self.single:
            return jax.device_put(tree, self.devices[0])

        def put(value, sharding):
            value = np.asarray(value)
            return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])

        return jax.tree.map(put, tree, shardings)

    def place_params(self, params):
        """The parameter tree, sharded as ``sharding`` says; records which stay replicated."""
        import jax

        shardings = self.state_shardings(params)
        if self.sharding == "fsdp" and not self.single:
            flat = jax.tree_util.tree_flatten_with_path(params)[0]
            self.replicated_names = ["/".join(str(getattr(k, "key", k)) for k in path) for path, leaf in flat
                                     if fsdp_dim(np.shape(leaf), self.n) is None]
        return self.place(params, shardings)

    def put_batch(self, batch: np.ndarray):
        """This process's rows of a global batch as the global [global_batch, S+1] array."""
        import jax

        batch = np.array(batch, dtype=np.int32, copy=True)
        if self.single:
            return jax.device_put(batch, self.devices[0])
        if batch.shape[0] != self.rows[1]:
            raise RuntimeError(f"the batch source gave {batch.shape[0]} rows; this process holds {self.rows[1]} "
                               f"of the global batch of {self.global_batch}")
        return jax.make_array_from_process_local_data(self.batch_sharding(), batch,
                                                      (self.global_batch, *batch.shape[1:]))

    def put_eval(self, batch: np.ndarray):
        """An evaluation batch: the full global batch (every process has it) or this process's rows."""
        import jax

        batch = np.asarray(batch, dtype=np.int32)
        if self.single or batch.shape[0] == self.rows[1]:
            return self.put_batch(batch)
        if batch.shape[0] != self.global_batch:
            raise RuntimeError(f"an evaluation batch has {batch.shape[0]} rows: neither the global batch "
                               f"({self.global_batch}) nor this process's rows ({self.rows[1]})")
        return jax.make_array_from_callback(batch.shape, self.batch_sharding(), lambda index: batch[index])

    def gather(self):
        """What the step applies to the parameters before using them: FSDP's all-gather to whole
        parameters (a sharding constraint; its transpose reduce-scatters the gradients), else None."""
        if self.sharding != "fsdp" or self.single:
            return None
        import jax

        replicated = self.replicated()
        return lambda params: jax.lax.with_sharding_constraint(params, replicated)


def host_value(array) -> np.ndarray:
    """A replicated (or single-device) array's value on the host: the local copy of it, which
    is all there is to read where the array spans processes."""
    shards = getattr(array, "addressable_shards", None)
    if shards and not array.is_fully_addressable:
        return np.asarray(shards[0].data)
    return np.asarray(array)


# ---- the record ----------------------------------------------------------------------------------

def gather_processes(values: np.ndarray) -> np.ndarray:
    """[processes, ...]: every process's ``values`` (the same shape in each); [1, ...] alone."""
    import jax

    values = np.asarray(values)
    if jax.process_count() == 1:
        return values[None]
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(values))


def _hostnames() -> list[str]:
    name = socket.gethostname().encode()[:64]
    codes = np.zeros(64, dtype=np.uint8)
    codes[:len(name)] = np.frombuffer(name, dtype=np.uint8)
    return [bytes(row).rstrip(b"\0").decode(errors="replace") for row in gather_processes(codes)]


def slowest_steps(step_ms: list[float]) -> tuple[list[float], list[float]]:
    """(each step's time on the slowest process, this process's median per process): with
    several processes each clocks its own steps; the slowest one decides."""
    table = gather_processes(np.asarray(step_ms, dtype=np.float64))
    return [float(x) for x in table.max(axis=0)], [float(np.median(row)) for row in table]


def memory_by_device(layout: Layout) -> list[tuple[int | None, int | None]]:
    """(peak bytes in use, peak pool bytes) of every mesh device, in mesh order; None where the
    backend reports nothing (the CPU)."""
    local = []
    for device in layout.local_devices:
        stats = device.memory_stats() or {}
        local.append([stats.get("peak_bytes_in_use", -1), stats.get("peak_pool_bytes", -1)])
    table = gather_processes(np.asarray(local, dtype=np.int64)).reshape(-1, 2)
    return [tuple(None if v < 0 else int(v) for v in row) for row in table]


def record(run, layout: Layout, process_medians: list[float], memory: list) -> dict:
    """The engine's part of run.json's ``parallel`` record (``results.py``): one ``per_rank``
    entry per device (its process's step-time median, its own peak memory)."""
    import jax

    processes = jax.process_count()
    hosts = _hostnames()
    launcher = "single" if layout.n == 1 and processes == 1 else \
        ("jax-local" if processes == 1 else "jax.distributed")
    per_rank = []
    for rank, (device, (peak, _)) in enumerate(zip(layout.devices, memory)):
        per_rank.append({"rank": rank, "process": device.process_index, "host": hosts[device.process_index],
                         "device": f"{device.platform}:{device.id}", "device_kind": device.device_kind,
                         "step_ms_median": process_medians[device.process_index],
                         "peak_allocated_bytes": peak})
    platform = layout.devices[0].platform
    return {
        "gpus": layout.n, "processes": processes, "hosts": len(set(hosts)), "sharding": run.sharding,
        "per_gpu_batch": run.batch_size, "global_batch": run.global_batch, "launcher": launcher,
        "backend": "xla",
        "collectives": "NCCL (XLA:GPU)" if platform == "gpu" else
                       ("gloo (XLA:CPU)" if processes > 1 else "in-process (XLA:CPU)"),
        "mesh": {"axes": [AXIS], "shape": [layout.n]},
        "launch": launch_kind(),
        "replicated_parameters": layout.replicated_names if run.sharding == "fsdp" else None,
        "replicated_state": "the recipe's extra collections (fp8 amax histories and scales, NVFP4 counters)",
        "per_rank": per_rank,
    }
