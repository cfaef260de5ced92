#!/usr/bin/env bash
# One host's share of a Parallax run over several hosts, started by hand (no Slurm). Run it on
# every host with the same arguments and NODE_RANK 0, 1, ... NNODES-1 (docs/multi-gpu.md):
#
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 scripts/multinode/hand_start.sh torch --steps 200 --output-dir /shared/r
#   NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 scripts/multinode/hand_start.sh torch --steps 200 --output-dir /shared/r
#
# The first argument is the framework (torch or jax); the rest go to `parallax train` as they
# are, after `--framework F --gpus NNODES×GPUS_PER_NODE` (--gpus counts every GPU of every host;
# --batch-size stays the per-GPU batch).
#
#   torch: torch's own launcher on each host, `python -m torch.distributed.run` with static
#          rendezvous at MASTER_ADDR:MASTER_PORT (--nnodes, --node-rank, --master-addr,
#          --master-port), one process per GPU; each is a rank of `parallax train`.
#   jax:   one `parallax train` process per host over all its GPUs; JAX_COORDINATOR_ADDRESS
#          (JAX's own variable: process 0's host:port), PARALLAX_NUM_PROCESSES and
#          PARALLAX_PROCESS_ID tell it to call jax.distributed.initialize.
#
# Environment:
#   NNODES, NODE_RANK, MASTER_ADDR  required: hosts, this host's index, host 0's address
#   MASTER_PORT=29500               a free TCP port on host 0 (the rendezvous / coordinator)
#   GPUS_PER_NODE                   default: the GPUs nvidia-smi lists here (give it with --device cpu)
#   PYTHON=python3                  the interpreter of the environment Parallax is installed in
#   DRY_RUN=1                       print the command (and the variables it sets) instead of running it
#   PARALLAX_MULTINODE_ENTRY        what each process runs instead of `-m parallax` (a script path;
#                                   the test suite uses it to check the rendezvous alone)
# NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are set
# where unset and kept where set (never unset): every rank inherits them.
set -euo pipefail

usage() { echo "usage: NNODES=N NODE_RANK=R MASTER_ADDR=HOST $0 torch|jax [parallax train args...]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
FRAMEWORK="$1"
shift
[[ "$FRAMEWORK" == torch || "$FRAMEWORK" == jax ]] || { echo "$0: framework must be torch or jax, got '$FRAMEWORK'" >&2; exit 2; }
for name in NNODES NODE_RANK MASTER_ADDR; do
  [[ -n "${!name:-}" ]] || { echo "$0: $name is not set" >&2; usage; }
done
[[ "$NNODES" =~ ^[1-9][0-9]*$ && "$NODE_RANK" =~ ^[0-9]+$ && "$NODE_RANK" -lt "$NNODES" ]] ||
  { echo "$0: need NNODES >= 1 and 0 <= NODE_RANK < NNODES, got NNODES=$NNODES NODE_RANK=$NODE_RANK" >&2; exit 2; }
MASTER_PORT="${MASTER_PORT:-29500}"
PYTHON="${PYTHON:-python3}"
if [[ -z "${GPUS_PER_NODE:-}" ]]; then
  GPUS_PER_NODE="$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU ' || true)"
fi
[[ "$GPUS_PER_NODE" =~ ^[1-9][0-9]*$ ]] ||
  { echo "$0: no GPU found here; set GPUS_PER_NODE (with --device cpu: CPU ranks per host)" >&2; exit 2; }
TOTAL=$((NNODES * GPUS_PER_NODE))

export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
export TORCH_SYMM_MEM_DISABLE_MULTICAST="${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}"
export NVSHMEM_DISABLE_NVLS="${NVSHMEM_DISABLE_NVLS:-1}"

if [[ -n "${PARALLAX_MULTINODE_ENTRY:-}" ]]; then ENTRY=("$PARALLAX_MULTINODE_ENTRY"); else ENTRY=(-m parallax); fi
TRAIN=("${ENTRY[@]}" train --framework "$FRAMEWORK" --gpus "$TOTAL" "$@")

if [[ "$FRAMEWORK" == torch ]]; then
  SET=()
  CMD=("$PYTHON" -m torch.distributed.run --nnodes "$NNODES" --node-rank "$NODE_RANK"
       --nproc-per-node "$GPUS_PER_NODE" --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT"
       --max-restarts 0 "${TRAIN[@]}")
else
  export JAX_COORDINATOR_ADDRESS="$MASTER_ADDR:$MASTER_PORT"
  export PARALLAX_NUM_PROCESSES="$NNODES" PARALLAX_PROCESS_ID="$NODE_RANK"
  SET=("JAX_COORDINATOR_ADDRESS=$JAX_COORDINATOR_ADDRESS" "PARALLAX_NUM_PROCESSES=$NNODES"
       "PARALLAX_PROCESS_ID=$NODE_RANK")
  CMD=("$PYTHON" "${TRAIN[@]}")
fi

if [[ -n "${DRY_RUN:-}" ]]; then
  [[ ${#SET[@]} -eq 0 ]] || printf '%s\n' "${SET[@]}"
  printf '%q ' "${CMD[@]}"
  echo
  exit 0
fi
exec "${CMD[@]}"
