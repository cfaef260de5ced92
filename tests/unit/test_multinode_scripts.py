"""scripts/multinode: the commands each host runs (hand-started and under Slurm, with stand-ins
for srun and scontrol), and a real rendezvous of two "hosts" on this machine (two launches,
one process each, on the CPU) with a probe in place of ``parallax train``."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts" / "multinode"
PROBE = ROOT / "tests" / "fixtures" / "rendezvous_probe.py"
KEPT = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PARALLAX_", "JAX_", "MASTER_"))
           and k not in ("NNODES", "NODE_RANK", "GPUS_PER_NODE", "DRY_RUN", *KEPT)}
    return {**env, **extra}


def run(script: str, *args, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPTS / script), *args], capture_output=True, text=True,
                          env=clean_env(**env), timeout=120)


@pytest.mark.parametrize("name", ["hand_start.sh", "slurm_torch.sbatch", "slurm_jax.sbatch"])
def test_scripts_parse_and_are_executable(name):
    path = SCRIPTS / name
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    assert os.access(path, os.X_OK)
    text = path.read_text()
    assert "NCCL_NVLS_ENABLE" in text
    assert not re.search(r"^[^#]*\b(unset\s|env\s+-u)", text, re.M)  # the NVLS/multicast switches stay set


def test_hand_started_torch_command():
    proc = run("hand_start.sh", "torch", "--recipe", "bf16", "--output-dir", "/shared/r",
               NNODES="2", NODE_RANK="1", MASTER_ADDR="10.0.0.1", GPUS_PER_NODE="8", PYTHON="py", DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    assert shlex.split(proc.stdout) == [
        "py", "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "8",
        "--master-addr", "10.0.0.1", "--master-port", "29500", "--max-restarts", "0",
        "-m", "parallax", "train", "--framework", "torch", "--gpus", "16", "--recipe", "bf16",
        "--output-dir", "/shared/r"]


def test_hand_started_jax_command_and_its_variables():
    proc = run("hand_start.sh", "jax", "--steps", "5", NNODES="4", NODE_RANK="3", MASTER_ADDR="head",
               MASTER_PORT="1234", GPUS_PER_NODE="8", PYTHON="py", DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == ["JAX_COORDINATOR_ADDRESS=head:1234", "PARALLAX_NUM_PROCESSES=4", "PARALLAX_PROCESS_ID=3"]
    assert shlex.split(lines[3]) == ["py", "-m", "parallax", "train", "--framework", "jax", "--gpus", "32",
                                     "--steps", "5"]


@pytest.mark.parametrize("env, needle", [
    ({"NODE_RANK": "0", "MASTER_ADDR": "h"}, "NNODES is not set"),
    ({"NNODES": "2", "NODE_RANK": "2", "MASTER_ADDR": "h"}, "0 <= NODE_RANK < NNODES"),
    ({"NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "h", "PATH": "/usr/bin:/bin"}, "set GPUS_PER_NODE"),
])
def test_hand_start_refuses_a_bad_setup_in_one_line(env, needle):
    proc = run("hand_start.sh", "torch", **env)
    assert proc.returncode == 2 and needle in proc.stderr and proc.stdout == ""
    assert run("hand_start.sh", "mxnet", NNODES="1", NODE_RANK="0", MASTER_ADDR="h").returncode == 2


def fake_slurm(tmp_path: Path) -> dict:
    """srun that runs its command once per host (SLURM_NODEID 0 and 1), scontrol that lists two hosts."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/usr/bin/env bash\n"
                                  "while [[ $1 == --* ]]; do shift; done\n"
                                  "for n in 0 1; do SLURM_NODEID=$n SLURM_PROCID=$n \"$@\" || exit $?; done\n")
    (bin_dir / "scontrol").write_text("#!/usr/bin/env bash\nprintf 'node001\\nnode002\\n'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2",
            "SLURM_JOB_NODELIST": "node[001-002]", "SLURM_GPUS_ON_NODE": "8", "PYTHON": "py", "DRY_RUN": "1"}


def test_slurm_torch_runs_torchrun_per_host_with_a_c10d_rendezvous(tmp_path):
    proc = run("slurm_torch.sbatch", "--steps", "5", "--output-dir", "/shared/r", **fake_slurm(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and lines[0] == lines[1]  # every host the same command; c10d numbers the hosts
    assert shlex.split(lines[0]) == [
        "py", "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "8", "--rdzv-backend", "c10d",
        "--rdzv-endpoint", "node001:29500", "--rdzv-id", "parallax-4242", "--max-restarts", "0",
        "-m", "parallax", "train", "--framework", "torch", "--gpus", "16", "--steps", "5", "--output-dir", "/shared/r"]


def test_slurm_jax_runs_one_process_per_host(tmp_path):
    proc = run("slurm_jax.sbatch", "--steps", "5", **fake_slurm(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert [shlex.split(line) for line in proc.stdout.splitlines()] == [
        ["py", "-m", "parallax", "train", "--framework", "jax", "--gpus", "16", "--steps", "5"]] * 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_hosts(framework: str, tmp_path: Path) -> list[dict]:
    """Both "hosts" of a hand-started launch on this machine, one CPU process each, at once."""
    port = str(free_port())
    procs = [subprocess.Popen(["bash", str(SCRIPTS / "hand_start.sh"), framework, "--device", "cpu"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=clean_env(NNODES="2", NODE_RANK=str(r), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                                            GPUS_PER_NODE="1", PYTHON=sys.executable,
                                            PARALLAX_MULTINODE_ENTRY=str(PROBE), JAX_PLATFORMS="cpu"),
                              cwd=tmp_path)
             for r in (0, 1)]
    seen = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=150)
            assert p.returncode == 0, err[-3000:]
            seen += [json.loads(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith("RENDEZVOUS ")]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return sorted(seen, key=lambda s: s["rank"])


@pytest.mark.slow
def test_two_hand_started_torch_hosts_meet_at_a_real_rendezvous(tmp_path):
    seen = two_hosts("torch", tmp_path)
    assert [(s["rank"], s["world"], s["sum"]) for s in seen] == [(0, 2, 3.0), (1, 2, 3.0)]
    assert sorted(s["node_rank"] for s in seen) == [0, 1]
    assert all(s["argv"] == ["train", "--framework", "torch", "--gpus", "2", "--device", "cpu"] for s in seen)
    assert all(s["kept"] == KEPT for s in seen)


@pytest.mark.slow
def test_two_hand_started_jax_hosts_meet_at_a_real_coordinator(tmp_path):
    seen = two_hosts("jax", tmp_path)
    assert [(s["rank"], s["world"]) for s in seen] == [(0, 2), (1, 2)]
    assert all(s["argv"] == ["train", "--framework", "jax", "--gpus", "2", "--device", "cpu"] for s in seen)
    assert all(s["kept"] == KEPT for s in seen)
