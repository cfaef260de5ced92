#!/usr/bin/env bash
# Start one JAX training process on this host of a several-host run (hand-started launch: run it
# on every host, each with its own HOST_ID; ssh or pdsh can do that for you).
#
#   bash scripts/jax_hosts.sh COORDINATOR:PORT HOSTS HOST_ID GPUS_PER_HOST [parallax train flags...]
#   # host 0:  bash scripts/jax_hosts.sh node0:12355 2 0 8 --model llama-100m --output-dir runs/2x8
#   # host 1:  bash scripts/jax_hosts.sh node0:12355 2 1 8 --model llama-100m --output-dir runs/2x8
#
# The variables the JAX engine reads (src/parallax/engines/jax/parallel.py):
#   JAX_COORDINATOR_ADDRESS  host:port of process 0 (JAX's own variable; the port must be free there)
#   PARALLAX_NUM_PROCESSES   the number of processes (one per host); PARALLAX_PROCESS_ID this one's, 0-based
#   JAX_LOCAL_DEVICE_IDS     optional (JAX's own): the GPUs of this process, e.g. 0,1,2,3; default the
#                            first GPUS_PER_HOST visible ones (CUDA_VISIBLE_DEVICES still applies)
# --gpus is the global count (HOSTS x GPUS_PER_HOST), the same on every host; each host reads its
# own rows of every global batch. Several processes on ONE host (the test lab) work the same way:
# give each its GPUs with JAX_LOCAL_DEVICE_IDS, or, with --device cpu, nothing (gloo collectives).
# A process that fails ends the others within jax.distributed's shutdown/heartbeat timeouts (60 s).
# NCCL settings in the environment (NCCL_NVLS_ENABLE=0, ...) pass to the process as they are.
set -euo pipefail

if [ $# -lt 4 ]; then
    sed -n '2,8p' "$0" >&2
    exit 2
fi
coordinator=$1 hosts=$2 host_id=$3 per_host=$4
shift 4
PARALLAX="${PARALLAX:-parallax}"

export JAX_COORDINATOR_ADDRESS="$coordinator"
export PARALLAX_NUM_PROCESSES="$hosts"
export PARALLAX_PROCESS_ID="$host_id"
exec $PARALLAX train --framework jax --gpus "$((hosts * per_host))" "$@"
