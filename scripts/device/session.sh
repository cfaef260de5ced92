#!/usr/bin/env bash
# A device lease's work as one detached pipeline on one warm GPU machine under one deadline: the parts named in
# PARTS, each a plan of `parallax benchmark --plan`, GPU tests or a script. It outlives each 10-minute call;
# every call packs what exists so far into $OUT. docs/benchmark.md ("On the device") walks through a lease.
#
#   call 1, carry .carry/gpu .carry/tinystories.tar.xz:   scripts/device/session.sh stage
#   call 2, carry .carry/mt:                              PARTS=... scripts/device/session.sh start [BUDGET_S]
#   later calls:                                          WAIT_S=... scripts/device/session.sh wait
#   without MaxText, from call 1:                         PARTS=... scripts/device/session.sh start [BUDGET_S]
#   here, on the CPU (every part's command):              DRY_RUN=1 scripts/device/session.sh pipeline
#
# The rules of the protocol (each learnt from a lease: docs/results/<date>-h200*/README.md):
# - A call carries at most 64 MiB, the tracked tree included: MaxText's bundle (.carry/mt) and TE's (.carry/gpu)
#   never travel together, nor beside docs/results (move it aside for the calls; git restores it), and the
#   tokens travel packed (`tar -cJf .carry/tinystories.tar.xz -C .carry tinystories`).
# - Each call first copies (or unpacks) the bundles it carries into $E/carry, since the next call's re-sync
#   deletes them; the pipeline also takes a bundle from the live checkout at a part boundary (session_carry.sh).
# - The bundles' order: TE installs in the background from the first part boundary after it came (its
#   extensions build for minutes) and no MaxText part starts while pip replaces the wheels both bundles hold, so
#   TE comes with `stage` and MaxText with `start`, which installs it first (session_te.sh).
# - A lent machine stays warm only 30 s between calls: make each call the moment the one before returns (a late
#   call loses the machine and what was not packed yet, docs/results/2026-12-01-h200-f/). `start` returns once
#   parallax and MaxText are in (START_WAIT_S, 150), `wait` when the pipeline is done or after WAIT_S (560): fit
#   the last call's WAIT_S to the lease's budget_left_s.
# - Every call packs what exists into $OUT/session.tar.gz (under 16 MiB, no raw traces) and hands over the TE
#   extensions built here ($E/keep/te_*_site.tar.xz: carry them in .carry/gpu instead of the sdists).
#
# PARTS (default "capture matrix curves profile"), in the order they run (session_parts.sh):
#   capture          MaxText's own output for the CPU tests' fixtures (CAPTURE_TRAIN=0: the export and direct run)
#   kernels16 kernels mxtests fp8tests limits   GPU tests and bf16 profiles before the rest (fp8tests' Flax half while TE
#                    builds)
#   convbase quantbench ncu curves profile   need no TE: they run while it builds, else after the matrix
#   boundtests bandtests fp8tests tejax conv   after TE: GPU tests, then plan convergence's TE recipes (convbase: its bf16)
#   matrix crossover nvfp4 nvfp4long   plans three-frameworks, crossover (then `parallax crossover` of its
#                    presets), nvfp4-emulation (after the NVFP4 tests and kernels), nvfp4-long
#   tuning feed fp8profiles   after TE: the stock-tuning sweep, MaxText's synthetic twin, fp8 profiles
#                    (session_tuning.sh, with limits)
# A benchmark part runs its plan with --resume; PART_PLAN, PART_ARGS (options replacing the plan's), PART_FROM
# (a committed benchmark to resume) and PART_S (its limit) change it: MATRIX_ARGS="--repeats 3" (bench()).
# Each part is bounded by its limit and the deadline (BUDGET_S from the start, 1440); the matrix leaves
# RESERVE_S (200) for each part to come. GPU_BY_S (480): no .carry/gpu by then, the TE cells are skipped;
# TE_WAIT_S (600): a TE build still running then is stopped. POLL_S (5): how often the waits look.
set -uo pipefail
SELF=$(realpath "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
cd "$HERE/../.."
E=${SESSION_DIR:-/tmp/session}
OUT=${OUT:-$E/out}
SITE=${CARRY_SITE:-/tmp/carry-site}  # where both bundles' install.sh install (CARRY_SITE: the tests' fake bundles)
BUNDLES="mt gpu tinystories"
mkdir -p "$E/carry" "$E/logs" "$OUT"
for lib in lib carry te parts tuning; do source "$HERE/session_$lib.sh" || exit 1; done

pipeline() {
    log "start, budget ${BUDGET}s, parts:$PARTS"
    LIVE=$PWD  # the checkout each call re-syncs
    if ((DRY)); then
        log "dry run: commands only, from $PWD"
    else
        nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,memory.used --format=csv > "$E/nvidia-smi.txt" 2>&1
        rm -rf "$E/src" && mkdir -p "$E/src" && tar -cf - --exclude=./.carry --exclude=./.git . | tar -xf - -C "$E/src"
        cd "$E/src" || exit 1
        git -C "$OLDPWD" log -1 --format='%H %s' > "$E/commit.txt" 2>/dev/null
    fi
    mkdir -p "$E/checkenv"
    [[ -d $DATA ]] || log "no $DATA yet (carry .carry/tinystories): the matrix and curves need it"
    part install 300 python3 -m pip install -q --no-build-isolation --no-deps \
        --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -e .
    if ((DRY)) || [[ -d $E/carry/mt ]]; then
        part carry-mt 240 bash -c "source '$E/carry/mt/install.sh'"
    else
        log "no .carry/mt in the first call: the MaxText parts will fail (carry .carry/mt with start)"
    fi
    part versions 120 bash -c "python3 -m pip list > '$E/pip-list.txt' 2>&1; python3 -m parallax check-env \
        > '$E/checkenv/before-te.txt' 2>&1; python3 -c 'import maxtext, jax; print(\"maxtext\", maxtext.__file__, \
        \"jax\", jax.__version__, jax.devices())'"
    touch "$E/setup.done"
    run_parts
    log "done"
    touch "$E/DONE"
}

run_parts() {  # every wanted part, in priority order, around TE's install
    want capture && run capture
    want kernels16 && run kernels16
    want kernels && run kernels
    want mxtests && run mxtests
    want fp8tests && run fp8tests_flax
    want limits && run limits
    for p in $NO_TE_PARTS; do  # while TE builds (or has not come yet): the parts that do not need it
        want $p || continue
        [[ $(te_state) == building || $(te_state) == waiting ]] || break
        run $p
    done
    if want matrix || want tejax || want fp8tests || want boundtests || want bandtests || want conv || want crossover; then
        wait_te
        want boundtests && run boundtests
        want bandtests && run bandtests
        want fp8tests && run fp8tests
        want tejax && run tejax
        want conv && run conv
        want matrix && run matrix
        want crossover && run crossover
    fi
    if want tuning || want feed || want fp8profiles; then
        wait_te
        for p in tuning feed fp8profiles; do want $p && run $p; done
    fi
    want nvfp4 && run nvfp4
    want nvfp4long && run nvfp4long
    for p in $NO_TE_PARTS; do
        want $p && [[ $DONE_PARTS != *" $p "* ]] && run $p
    done
}

[[ ${SESSION_LIB:-0} == 1 ]] && return 0  # sourced by the tests: the functions only

case ${1:-} in
    start)
        adopt
        if alive; then
            echo "[session] a pipeline is already running; waiting for it"
            wait_for "$E/DONE" "${WAIT_S:-560}"
        else
            rm -f "$E/DONE" "$E/setup.done" "$E/te.started" "$E/te.ready" "$E/te.none" "$E/te.pid"
            setsid nohup bash "$SELF" pipeline "${2:-1440}" >"$E/pipeline.log" 2>&1 </dev/null &
            echo $! > "$E/pipeline.pid"
            wait_for "$E/setup.done" "${START_WAIT_S:-150}"  # back once parallax and MaxText are in
        fi
        report; exit 0 ;;
    stage) adopt; ls "$E/carry"; exit 0 ;;  # take the bundles this call brought; a later `start` starts
    wait) adopt; wait_for "$E/DONE" "${WAIT_S:-560}"; report; exit 0 ;;
    pipeline) settings "${2:-1440}"; pipeline ;;
    *) echo "usage: $0 stage | start [BUDGET_S] | wait   (DRY_RUN=1 $0 pipeline [BUDGET_S]: print the parts)"; exit 2 ;;
esac
