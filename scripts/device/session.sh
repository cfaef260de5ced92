#!/usr/bin/env bash
# A device lease's work as one detached pipeline on one warm H200, under one deadline: the GPU tests,
# the throughput matrix, convergence, the crossover, MaxText, the NVFP4 kernels (PARTS, below).
# It outlives each 10-minute call; every call packs what exists so far.
#
#   without MaxText, carry .carry/gpu .carry/tinystories.tar.xz:
#                         PARTS=... scripts/device/session.sh start [BUDGET_S]; WAIT_S=... scripts/device/session.sh wait
#   with MaxText: call 1, carry .carry/gpu .carry/tinystories.tar.xz:   scripts/device/session.sh stage
#                 call 2, carry .carry/mt:                              scripts/device/session.sh start [BUDGET_S]
#   later calls:                                          scripts/device/session.sh wait
#   here, on the CPU:                                     DRY_RUN=1 scripts/device/session.sh pipeline
#
# docs/results/2026-12-02-h200-d/README.md has a whole lease's commands (every fp8 recipe's matrix and
# a convergence benchmark, four calls, 1,623 s of device time); docs/results/2026-12-02-h200-e/README.md a
# crossover lease that measured only the cells each preset lacked (XO_PRECISIONS, XO_RECIPES_<preset>).
#
# One call carries at most 64 MiB, the tracked tree included (~24 MB by the evening of 2026-12-02,
# ~22 MB of it docs/results), and MaxText's bundle (.carry/mt, 44 MB) and TE (.carry/gpu, 43 MB)
# cannot travel together; nor, by then, either of them beside the whole tree. For the calls, move
# docs/results aside and keep only what MATRIX_FROM / NVFP4_FROM name (git restores the rest:
# 5.3 MB of tree on 2026-12-02, docs/results/2026-12-02-h200-c/README.md); nor does the token folder (5 MB). So the tokens travel as
# .carry/tinystories.tar.xz (1.7 MB: `tar -cJf .carry/tinystories.tar.xz -C .carry tinystories`),
# `stage` only takes the bundles a call brings (TE's install starts at the pipeline's first part
# boundary, so call 1 brings it), and every call first copies (or unpacks) each bundle it carries
# to /tmp/session/carry/ (a later call's re-sync deletes what that call does not carry; the
# pipeline also looks into the live checkout at each part boundary, for a call that ran another
# command), and the pipeline installs each with the bundle's own install.sh into /tmp/carry-site
# once it is there: MaxText at the start, TE (its torch extension builds in ~130 s, the JAX one in
# ~250 s more; leave transformer_engine_jax-*.tar.gz out of .carry/gpu to skip it) in the background
# at the first part boundary after it came, on cores 4.. at low priority. `start` returns once
# parallax and MaxText are installed (~1 min; START_WAIT_S), `wait` waits for the pipeline at most
# WAIT_S (560) seconds. (The older order, .carry/mt with `start` and .carry/gpu in call 2, works
# too.) Every call packs what exists so far into $OUT/session.tar.gz (under 16 MiB: raw
# xplane files stay out, compressed traces over 8 MB too), so a machine lost between calls loses
# only what had not come back yet.
#
# A lent machine stays warm 30 s between calls. Make each call the moment the one before returns:
# on 2026-12-01 (docs/results/2026-12-01-h200-f/) two late calls each lost the machine and all
# that the pipeline had not packed yet, and on 2026-12-02 one more (docs/results/2026-12-02-h200/:
# its benchmark was then resumed on a new machine from the returned folder, staged into
# /tmp/session/matrix/bench before `start`). Fewer calls mean fewer such gaps: give `start` a long
# START_WAIT_S where nothing needs the second bundle soon (GPU_BY_S=0 and no TE cells), and fit
# the last call's WAIT_S to the lease's budget_left_s.
#
# PARTS (default "capture matrix curves profile") picks what runs; in priority order:
#
#   capture  real MaxText output for the CPU tests' fixtures: `parallax train --framework maxtext`
#            bf16 and fp8 (fp8_gpu), synthetic, 30 steps, MaxText's metrics file and train log as
#            written (capture/train-*/maxtext/; CAPTURE_TRAIN=0 skips these two, whose files
#            every maxtext run of the matrix keeps too); `parallax export-configs` of every recipe; a
#            direct `python -m maxtext.trainers.pre_train.train` of an exported YAML, as it is.
#   matrix   `parallax benchmark` torch,jax,maxtext x bf16,fp8 plus maxtext:bf16-defaults (MaxText's
#            base.yml performance settings) and maxtext:te_fp8_delayedscaling (skipped cleanly
#            without TE's JAX extension), llama-100m, 32 x 1024, 60 steps (20 warm-up), real
#            tokens, REPEATS (3) repeats, --report (MATRIX_FROM: a benchmark folder of the tree to
#            resume, e.g. docs/results/<date>-h200/matrix, copied to the matrix's folder first; with
#            MATRIX_RECIPES naming recipes it lacks, --resume adds those cells to it; MATRIX_STEPS and RUN_TIMEOUT_S replace the 60
#            steps and the 360 s a cell may take: more steps cost seconds a cell, since start-up and
#            compiling dominate; a cold maxtext fp8_gpu run took ~300 s on 2026-12-02, ~125 s of
#            it writing its initial weights); after TE is installed (or known absent), with
#            no build running. Cut at its limit, `parallax compare` still writes the report.
#   curves   maxtext and jax bf16, CURVE_STEPS (300) steps on the same tokens: one benchmark whose
#            report's plots/loss.png overlays the two loss curves.
#   profile  scripts/device/profile_step.py: our jax engine's bf16 step and MaxText's (MaxText's own
#            profiler=xplane), then --compare: the two kernel-category breakdowns side by side.
#            PROFILE_JAX (none) adds jax recipes, each compared with jax bf16 (e.g. flax-fp8-delayed);
#            PROFILE_MAXTEXT (bf16) lists MaxText's, "" for none.
#
# More parts, not in the default PARTS, for the fp8/NVFP4 issues' leftovers on the same lease:
#
#   fp8tests every fp8 recipe's GPU tests: the Flax ones (tests/gpu/test_jax_fp8_gpu.py, ~70 s) right
#            after the kernels, while TE builds; the torch ones (TE, torchao) and TE-JAX's once TE is
#            installed, before the matrix (~130 s).
#   boundtests  once TE is installed, before the matrix: the per-layer error bounds and bf16 loss band of
#            every GPU recipe (tests/gpu/test_layer_error_bounds_gpu.py, -s prints each ratio), under
#            BOUNDTESTS_S (200 s).
#   tejax    the TE-JAX GPU tests (tests/gpu/test_jax_te_gpu.py) alone, once TE is installed, before the
#            matrix. MATRIX_RECIPES replaces the matrix's own --recipes beyond bf16,fp8 (default
#            jax:flax-fp8-direct,maxtext:bf16-defaults,maxtext:te_fp8_delayedscaling; a maxtext run
#            costs 75-220 s, so 3 repeats of all nine cells need ~1,300 s). MATRIX_EXTRA (a --recipes list, e.g. jax:te-bf16,jax:te-fp8-delayed) adds
#            cells to the matrix.
#   nvfp4    after the matrix, on a quiet GPU: the CUDA quantization GPU tests, then
#            scripts/device/quant_bench.py (the kernels' device
#            time from CUDA-graph replays), profile_step.py of torch's and jax's emulated-nvfp4
#            steps, and bf16 + emulated-nvfp4 of both engines, REPEATS repeats (the emulation cost).
#
#   nvfp4long  after nvfp4: bf16 and emulated-nvfp4 of both engines, 1,000 steps, NVFP4_SEEDS (0,1),
#            evaluation every 100 steps on 5 batches, 8 runs sharing the GPU (loss only; ~670 s for 8 runs).
#            NVFP4_FROM: a committed benchmark to resume, so that more seeds only run the new ones.
#            The nvfp4 part's benchmark takes REPEATS (3) repeats, NVFP4_REPEATS where set.
#
#   quantbench  while TE builds (or after the matrix): scripts/device/quant_bench.py alone, the
#            NVFP4 kernels' device time from CUDA-graph replays against torch.compile (~1-2 min; its
#            device times are the GPU's own, its Python-driven times may be slowed by the build).
#
#   kernels16  right after the capture (~1 min): the CUDA quantization tests of the 16x1 mode
#            and the emulated linears' GPU tests that use it, the first check of those kernels on a GPU.
#
#   kernels  right after the capture (~2 min): every CUDA quantization GPU test and the emulated
#            linears' (the nvfp4 part then skips them); for new kernels, before anything uses them.
#
#   ncu      after quantbench, while TE builds (~1 min): the kernels' hardware counters under Nsight
#            Compute (quant_bench.py --profile-only), where ncu is installed.
#
#   convbase while TE builds: the cells of a convergence benchmark that need no TE: the bf16 twins
#            (CONV_FRAMEWORKS, default jax) and CONVBASE_RECIPES (none; e.g. torchao and Flax fp8),
#            CONV_STEPS (1000) steps, evaluation every 100 steps on 5 batches, CONV_SEEDS (0),
#            CONV_CONCURRENT (1) runs at once (each under CONV_RUN_TIMEOUT_S, 500 s), the part under
#            CONVBASE_S (400 s); loss only (a build shares the
#            machine), so that the conv part after TE runs only the TE recipes.
#   conv     after TE, before the matrix: CONV_RECIPES (jax:te-fp8-delayed) added to that benchmark
#            (--resume; the convbase cells too, where convbase did not run), under CONV_S (400 s),
#            --report: each recipe's ΔLoss against its bf16 twin from the same weights and batches.
#   crossover  after the matrix, on a quiet GPU: where fp8 starts to pay. The larger presets (XO_MODELS:
#            llama-330m llama-860m), XO_FRAMEWORKS (torch,jax) at XO_PRECISIONS (bf16,fp8) plus XO_RECIPES
#            (every other recipe of both: TE bf16 and fp8, torchao, Flax, TE-JAX; XO_RECIPES_<preset>, e.g.
#            XO_RECIPES_llama_860m, replaces it for one preset), one run each, synthetic tokens,
#            XO_STEPS (30) steps (10 warm-up), XO_TIMEOUT (240 s) a run (torchao compiles ~150 s at
#            llama-330m), each preset under XO_PART_S (900 s); XO_FROM: a folder of committed crossover
#            benchmarks, one per preset, to resume; then `parallax crossover` of XO_BASE (the llama-100m
#            benchmark: this pipeline's matrix by default) and the presets.
#
# MATRIX_FRAMEWORKS (torch,jax,maxtext) picks the matrix's frameworks: torch,jax with every fp8
# recipe in MATRIX_RECIPES is issue 10's one matrix of every recipe, without MaxText's bundle.
#
# Parts that need no TE (curves, then profile) run while TE builds; the matrix waits for TE,
# and then the rest of curves/profile run. Each part is bounded by its own limit and by the time
# left to the deadline (BUDGET_S from the start, default 1440 s); the matrix leaves RESERVE_S
# (default 200 s) for each part still to come. GPU_BY_S (480): when .carry/gpu has not come by
# then, the TE cells are skipped; TE_WAIT_S (600): a TE build still running after that long is
# stopped (the TE cells are skipped then too).
#
# TE's framework extensions are built once: when TE is ready, the pipeline keeps each one built
# from an sdist as $E/keep/te_<torch|jax>_site.tar.xz, and every later call hands them to $OUT (in
# 15 MiB pieces where larger: `cat F.part-* > F`). Put them in .carry/gpu and move the two sdists out
# of it: install.sh unpacks *_site.tar.xz in seconds, where the builds took ~440 s (2026-12-02). They
# fit only this image (torch 2.11+cu130, JAX 0.11.2, Python 3.12, sm_90).
#
# POLL_S (5): how often the waits look (the tests set it low).
#
# The pipeline runs from its own copy of the checkout and tokens under /tmp/session: each bundle
# needs to come once per machine.
set -uo pipefail
SELF=$(realpath "${BASH_SOURCE[0]}")
cd "$(dirname "$SELF")/../.."
E=${SESSION_DIR:-/tmp/session}
OUT=${OUT:-$E/out}
SITE=${CARRY_SITE:-/tmp/carry-site}  # where both bundles' install.sh install (CARRY_SITE: the tests' fake bundles)
BUNDLES="mt gpu tinystories"
mkdir -p "$E/carry" "$E/logs" "$OUT"

adopt() {  # adopt [ROOT] [B...]: copy (or unpack, from B.tar.xz) each bundle ROOT/.carry holds into $E/carry, once
    local root=${1:-.} b; shift || true
    for b in ${@:-$BUNDLES}; do
        [[ ! -d $E/carry/$b ]] || continue
        rm -rf "$E/carry/$b.tmp"
        if [[ -d $root/.carry/$b ]]; then
            cp -a "$root/.carry/$b" "$E/carry/$b.tmp" && mv "$E/carry/$b.tmp" "$E/carry/$b" \
                && echo "[session] copied .carry/$b to $E/carry/$b"
        elif [[ -f $root/.carry/$b.tar.xz ]]; then  # a tarball of the folder .carry/$b itself
            mkdir -p "$E/carry/$b.tmp" && tar -xJf "$root/.carry/$b.tar.xz" -C "$E/carry/$b.tmp" --strip-components=1 \
                && mv "$E/carry/$b.tmp" "$E/carry/$b" && echo "[session] unpacked .carry/$b.tar.xz to $E/carry/$b"
        fi
    done
}

poll_live() {  # the pipeline's own look at the live checkout, for a call that carried a bundle but
    # ran no `wait`: a bundle is taken once its files stood unchanged between two looks (the
    # working tree may be syncing)
    local b now
    for b in $BUNDLES; do
        [[ -d $LIVE/.carry/$b && ! -d $E/carry/$b ]] || continue
        now=$(cd "$LIVE/.carry/$b" && find . -type f -printf '%p %s %T@\n' | sort | md5sum)
        if [[ $now == "$(cat "$E/carry/$b.seen" 2>/dev/null)" ]]; then
            log "$(adopt "$LIVE" "$b")"
        else
            echo "$now" > "$E/carry/$b.seen"
        fi
    done
}

pack() {
    local base parent tarball=$OUT/session.tar.gz
    base=$(basename "$E") parent=$(dirname "$E")
    {   # never: the checkout copy, the bundles, raw traces (their tar.gz travels), this call's $OUT
        printf '%s\n' "$base/src" "$base/carry" "$base/out" "$base/keep" '*.xplane.pb'
        (cd "$parent" && find "$base" -type f -name 'trace_*' -size +8M)
    } > "$E/.pack-exclude"
    tar -czf "$tarball" -C "$parent" -X "$E/.pack-exclude" "$base" 2>/dev/null
    if (($(stat -c %s "$tarball") > 15 * 1024 * 1024)); then
        echo "[session] over 15 MiB: packed again without any trace_* file"
        echo 'trace_*' >> "$E/.pack-exclude"
        tar -czf "$tarball" -C "$parent" -X "$E/.pack-exclude" "$base" 2>/dev/null
    fi
    hand_over_kept
    ls -la "$OUT"
}

hand_over_kept() {  # each kept file into $OUT as it is, or in 15 MiB pieces (`cat F.part-* > F` puts it together),
    # when all of them fit beside what $OUT holds: a call brings back 8 files and 64 MiB at most
    local f bytes=0 files=0 size
    for f in "$E"/keep/*; do  # what an earlier pack of this call handed over is counted once, as kept
        [[ -f $f ]] && rm -f "$OUT/$(basename "$f")" "$OUT/$(basename "$f")".part-*
    done
    for f in "$E"/keep/* "$OUT"/*; do
        [[ -f $f ]] || continue
        size=$(stat -c %s "$f")
        bytes=$((bytes + size)) files=$((files + (size + 15 * 1024 * 1024 - 1) / (15 * 1024 * 1024)))
    done
    if ((bytes > 60 * 1024 * 1024 || files > 8)); then
        echo "[session] the kept TE builds do not fit beside this call's files ($((bytes >> 20)) MiB, $files files): not handed over"
        return 0
    fi
    for f in "$E"/keep/*; do
        [[ -f $f ]] || continue
        if (($(stat -c %s "$f") > 15 * 1024 * 1024)); then
            split -b 15M "$f" "$OUT/$(basename "$f").part-"
        else
            cp "$f" "$OUT/"
        fi
    done
}

alive() { [[ -f $E/pipeline.pid ]] && kill -0 "$(cat "$E/pipeline.pid")" 2>/dev/null; }

wait_for() {  # wait_for FILE LIMIT_S: until FILE exists, the pipeline is gone, or LIMIT_S passed
    local t0=$SECONDS
    while [[ ! -f $1 ]] && alive && ((SECONDS - t0 < $2)); do sleep "${POLL_S:-5}"; done
}

report() {
    tail -n 40 "$E/pipeline.log" 2>/dev/null
    if [[ -f $E/DONE ]]; then echo "[session] pipeline done"
    elif alive; then echo "[session] pipeline still running"
    else echo "[session] no pipeline running here (never started on this machine, or it died: see pipeline.log)"; fi
    pack
}

# ------------------------------------------------------------------------------ the pipeline
settings() {  # settings BUDGET_S: the pipeline's knobs, from the environment
    BUDGET=${1:-1440}
    START=$SECONDS
    DRY=${DRY_RUN:-0}
    PARTS=" ${PARTS:-capture matrix curves profile} "
    GPU_BY=${GPU_BY_S:-480}
    TE_WAIT=${TE_WAIT_S:-600}
    RESERVE=${RESERVE_S:-200}
    DATA=$E/carry/tinystories
    export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
    export JAX_COMPILATION_CACHE_DIR=/tmp/jax-cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
    export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
    SIZE=(--model llama-100m --seeds 0 --batch-size 32 --seq-len 1024)
    DONE_PARTS=" "
    LIVE=$PWD
    NO_TE_PARTS="convbase quantbench ncu curves profile"  # what may run while TE builds, else after the matrix
}

left() {  # seconds to the deadline; a dry run spends none (its limits are the budget's arithmetic)
    if ((DRY)); then echo "$BUDGET"; else echo $((BUDGET - (SECONDS - START))); fi
}
log() { echo "[$(date -u +%H:%M:%S) +$((SECONDS - START))s] $*"; }
want() { [[ $PARTS == *" $1 "* ]]; }
part() {  # part NAME LIMIT_S COMMAND...: bounded by LIMIT_S and the deadline; output to $LOG or logs/NAME.txt
    local name=$1 limit=$2; shift 2
    local out=${LOG:-$E/logs/$name.txt} room; room=$(left)
    if ((DRY)); then printf 'DRY part %s %s' "$name" "$limit"; printf ' %q' "$@"; printf '\n'; return 0; fi
    poll_live
    maybe_start_te
    ((room < limit)) && limit=$room
    if ((limit < 20)); then log "$name: skipped, ${room}s left"; return 1; fi
    mkdir -p "$(dirname "$out")"
    local t0=$SECONDS building=""
    [[ $(te_state) == building ]] && building=" [TE building meanwhile]"
    timeout "$limit" "$@" >>"$out" 2>&1
    local rc=$?
    log "$name: rc=$rc in $((SECONDS - t0))s (limit ${limit}s)$building; $(tail -n 1 "$out" | cut -c1-200)"
    return $rc
}

# ------------------------------------------------------------------------------ TE (.carry/gpu)
te_state() {  # ready | building | waiting (.carry/gpu not here or not started yet) | none
    if ((DRY)) || [[ -f $E/te.ready ]]; then echo ready
    elif [[ -f $E/te.none ]]; then echo none
    elif [[ -f $E/te.started ]]; then echo building
    elif [[ -d $E/carry/gpu ]] || ((SECONDS - START < GPU_BY)); then echo waiting
    else echo none; fi
}
maybe_start_te() {  # at a part boundary: no MaxText starts while pip replaces the wheels both bundles hold
    [[ -d $E/carry/gpu && ! -f $E/te.started ]] || return 0
    touch "$E/te.started"
    local cores=() n; n=$(nproc)
    ((n > 4)) && command -v taskset >/dev/null && cores=(taskset -c "4-$((n - 1))")
    log "TE: installing .carry/gpu in the background (${cores[*]:-all cores}, nice 10)"
    setsid "${cores[@]}" nice -n 10 bash -c "source '$E/carry/gpu/install.sh'; touch '$E/te.ready'" \
        > "$E/logs/carry-gpu.txt" 2>&1 < /dev/null &
    echo $! > "$E/te.pid"
    local t0=$SECONDS  # the wheels and TE's core first (seconds); the extensions build on
    while ! grep -qxF te_core_sm90.tar.xz "$SITE/.installed" 2>/dev/null && [[ ! -f $E/te.ready ]] \
        && ((SECONDS - t0 < 120)); do sleep "${POLL_S:-2}"; done
}
keep_te_builds() {  # TE's framework extensions as built here (install.sh leaves each sdist's pip --target in
    # a mktemp dir, /tmp/tmp.*/out), each as te_<framework>_site.tar.xz for $OUT: a later session carries
    # them in .carry/gpu instead of the sdists, and install.sh unpacks them (*_site.tar.xz) in seconds
    local d fw kept
    mkdir -p "$E/keep"
    for d in "${TE_BUILD_ROOT:-/tmp}"/tmp.*/out; do
        for fw in torch jax; do
            kept=$E/keep/te_${fw}_site.tar.xz
            [[ ! -f $kept ]] && compgen -G "$d/transformer_engine_${fw}-*.dist-info" >/dev/null || continue
            tar -cJf "$kept.tmp" -C "$d" . && mv "$kept.tmp" "$kept" \
                && log "TE: kept the built $fw extension, $(du -k "$kept" | cut -f1) KiB ($(basename "$kept"))"
        done
    done
}

wait_te() {
    local t0=$SECONDS
    while [[ $(te_state) == building || $(te_state) == waiting ]] && (($(left) > 60)); do
        poll_live
        maybe_start_te  # no part runs now: the bundle may start installing
        if [[ $(te_state) == building ]] && ((SECONDS - t0 > TE_WAIT)); then
            kill -- -"$(cat "$E/te.pid")" 2>/dev/null
            echo "TE build stopped after waiting ${TE_WAIT}s" > "$E/te.none"
        fi
        sleep "${POLL_S:-5}"
    done
    case $(te_state) in
        ready) ((DRY)) || { log "TE: $(tail -n 2 "$E/logs/carry-gpu.txt" | tr '\n' ' ' | cut -c1-200)"; keep_te_builds; }
               part checkenv-te 120 bash -c "python3 -m parallax check-env > '$E/checkenv/after-te.txt' 2>&1; \
                   python3 -m parallax check-env --json > '$E/checkenv/after-te.json'" ;;
        *) [[ -f $E/te.none ]] || echo "no .carry/gpu by ${GPU_BY}s" > "$E/te.none"
           log "TE: none ($(cat "$E/te.none")): the TE cells will be skipped" ;;
    esac
}

# ------------------------------------------------------------------------------ the parts
run_capture_train() {  # CAPTURE_TRAIN=0 skips it: the matrix's maxtext runs keep the same files
    local c=$1
    part capture-bf16 300 python3 -m parallax train --framework maxtext --precision bf16 --model llama-100m \
        --synthetic --steps 30 --warmup 10 --output-dir "$c/train-bf16"
    part capture-fp8 300 python3 -m parallax train --framework maxtext --precision fp8 --model llama-100m \
        --synthetic --steps 30 --warmup 10 --output-dir "$c/train-fp8"
}

run_capture() {
    local c=$E/capture
    if ((${CAPTURE_TRAIN:-1})); then run_capture_train "$c"; fi
    part capture-export 60 python3 -m parallax export-configs --output-dir "$c/configs"
    part capture-export-direct 60 python3 -m parallax export-configs --output-dir "$c/direct" --recipes bf16 \
        --steps 30
    LOG=$c/direct/train.log part capture-direct 300 env DECOUPLE_GCLOUD=TRUE python3 -m \
        maxtext.trainers.pre_train.train "$c/direct/maxtext-llama-100m-bf16.yml" run_name=direct \
        "base_output_directory=$c/direct/output" "metrics_file=$c/direct/metrics.jsonl"
    local check='import sys; from parallax.engines.maxtext import metrics as m; s = m.read_metrics(sys.argv[1]); '
    check+='print(f"direct run: {len(s)} steps, loss {s[0].loss:.3f} -> {s[-1].loss:.3f}")'
    part capture-direct-read 60 python3 -c "$check" "$c/direct/metrics.jsonl"
}

resume_from() {  # resume_from SRC DEST: a benchmark committed to the tree becomes DEST once (--resume runs the rest)
    [[ -n $1 && ! -d $2 ]] || return 0
    mkdir -p "$(dirname "$2")" && cp -a "$1" "$2" && log "$(basename "$(dirname "$2")"): resuming $1"
}

run_matrix() {
    local todo=0 p limit
    resume_from "${MATRIX_FROM:-}" "$E/matrix/bench"
    for p in $NO_TE_PARTS crossover nvfp4; do want $p && [[ $DONE_PARTS != *" $p "* ]] && todo=$((todo + 1)); done
    limit=${MATRIX_S:-$(($(left) - todo * RESERVE - 60))}
    part matrix "$limit" python3 -m parallax benchmark --frameworks "${MATRIX_FRAMEWORKS:-torch,jax,maxtext}" \
        --precisions bf16,fp8 \
        --recipes "${MATRIX_RECIPES-jax:flax-fp8-direct,maxtext:bf16-defaults,maxtext:te_fp8_delayedscaling}${MATRIX_EXTRA:+,$MATRIX_EXTRA}" \
        "${SIZE[@]}" \
        --steps "${MATRIX_STEPS:-60}" --warmup 20 \
        --repeats "${REPEATS:-3}" --data "$DATA" --epochs 20 --timeout-per-run "${RUN_TIMEOUT_S:-360}" \
        --output-dir "$E/matrix/bench" --resume --report
    report_of "$E/matrix/bench"
}

report_of() {  # a benchmark cut at its limit wrote no report: compare writes it from the finished cells
    ((DRY)) || [[ ! -f $1/report.md ]] || return 0
    part "$(basename "$(dirname "$1")")-report" 60 python3 -m parallax compare --results-dir "$1" \
        --output-report "$1/report.md"
}

conv() {  # conv NAME LIMIT_S PRECISIONS [--recipes R --report]: the convergence benchmark, resumed
    local name=$1 limit=$2 precisions=$3; shift 3
    part "$name" "$limit" python3 -m parallax benchmark --frameworks "${CONV_FRAMEWORKS:-jax}" \
        --precisions "$precisions" "$@" --model llama-100m --seeds "${CONV_SEEDS:-0}" --batch-size 32 --seq-len 1024 \
        --steps "${CONV_STEPS:-1000}" --warmup 20 --repeats 1 --data "$DATA" --epochs 40 --eval-every 100 \
        --eval-batches 5 --concurrent "${CONV_CONCURRENT:-1}" --timeout-per-run "${CONV_RUN_TIMEOUT_S:-500}" --output-dir "$E/conv/bench" \
        --resume
}

run_convbase() { conv convbase "${CONVBASE_S:-400}" bf16 ${CONVBASE_RECIPES:+--recipes "$CONVBASE_RECIPES"}; }

run_conv() {
    conv conv "${CONV_S:-400}" bf16 --recipes "${CONVBASE_RECIPES:+$CONVBASE_RECIPES,}${CONV_RECIPES:-jax:te-fp8-delayed}" \
        --report  # convbase's recipes too: a resumed benchmark may only grow
    DONE_PARTS+="convbase "  # its cells are in this benchmark now
    report_of "$E/conv/bench"
}

run_curves() {
    part curves 500 python3 -m parallax benchmark --frameworks jax,maxtext --precisions bf16 "${SIZE[@]}" \
        --steps "${CURVE_STEPS:-300}" --warmup 20 --repeats 1 --data "$DATA" --epochs 20 --timeout-per-run 400 \
        --output-dir "$E/curves/bench" --resume --report
    report_of "$E/curves/bench"
}

run_profile() {
    local p=$E/profile r
    part profile-jax 180 python3 scripts/device/profile_step.py --framework jax --recipe bf16 --out "$p" --keep-trace
    for r in ${PROFILE_JAX:-}; do  # more jax recipes, each against jax bf16
        part "profile-jax-$r" 180 python3 scripts/device/profile_step.py --framework jax --recipe "$r" --out "$p" \
            --keep-trace
        part "profile-compare-jax-$r" 30 python3 scripts/device/profile_step.py --compare \
            "$p/profile_jax_bf16.json" "$p/profile_jax_$r.json" --out "$p"
    done
    for r in ${PROFILE_MAXTEXT-bf16}; do
        part "profile-maxtext-$r" 300 python3 scripts/device/profile_step.py --framework maxtext --recipe "$r" \
            --out "$p" --keep-trace
        part "profile-compare-$r" 30 python3 scripts/device/profile_step.py --compare "$p/profile_jax_bf16.json" \
            "$p/profile_maxtext_$r.json" --out "$p"
    done
}

quant_bench() {  # quant_bench NAME LIMIT_S DIR: the kernels' device time (issue 11's targets) into DIR
    mkdir -p "$3"
    part "$1" "$2" env OUT="$3" python3 scripts/device/quant_bench.py
}

run_quantbench() { quant_bench quantbench 240 "$E/quantbench"; }  # without the rest of the nvfp4 part

run_ncu() {  # the NVFP4 kernels' hardware counters (Nsight Compute), each native schedule and variant
    if ! ((DRY)) && ! command -v ncu >/dev/null; then log "ncu: not on this machine"; return 0; fi
    mkdir -p "$E/ncu"
    LOG=$E/ncu/ncu.txt part ncu 150 ncu --clock-control none --set basic --section MemoryWorkloadAnalysis \
        --section WarpStateStats -k 'regex:nvfp4|amax' --launch-count 60 \
        python3 scripts/device/quant_bench.py --profile-only
}

gpu_tests() { part "$1" "$2" python3 -m pytest -q -p no:cacheprovider -m gpu -rs "${@:3}"; }  # NAME LIMIT_S ARGS

run_kernels() {  # every CUDA quantization GPU test and the emulated linears' (new kernels first: before the rest)
    gpu_tests kernels 300 tests/gpu/test_quant_cuda_gpu.py tests/gpu/test_nvfp4_emulated_gpu.py
}

run_kernels16() {  # the 16x1 CUDA kernels and the wgrad operands that use them, never yet run on a GPU
    gpu_tests kernels16 150 tests/gpu/test_quant_cuda_gpu.py tests/gpu/test_nvfp4_emulated_gpu.py \
        -k "16x1 or jax_ffi or counter_qdq or linears_have"
}

run_fp8tests_flax() { gpu_tests fp8tests-flax 240 tests/gpu/test_jax_fp8_gpu.py; }
run_fp8tests() { gpu_tests fp8tests 360 tests/gpu/test_torch_fp8_gpu.py tests/gpu/test_jax_te_gpu.py; }

# every recipe of both frameworks beyond bf16 and the default fp8 ones: TE bf16 and fp8, torchao, Flax, TE-JAX
OTHER_RECIPES=torch:te-bf16,torch:te-fp8-current,torch:torchao-fp8-tensorwise,torch:torchao-fp8-rowwise
OTHER_RECIPES=$OTHER_RECIPES,jax:flax-fp8-direct,jax:te-bf16,jax:te-fp8-delayed

run_crossover() {
    local model dirs=() own
    for model in ${XO_MODELS:-llama-330m llama-860m}; do
        own=XO_RECIPES_${model//-/_}  # e.g. XO_RECIPES_llama_860m: this preset's own list
        resume_from "${XO_FROM:+$XO_FROM/$model}" "$E/crossover/$model"
        part "crossover-$model" "${XO_PART_S:-900}" python3 -m parallax benchmark \
            --frameworks "${XO_FRAMEWORKS:-torch,jax}" --precisions "${XO_PRECISIONS:-bf16,fp8}" \
            --recipes "${!own:-${XO_RECIPES:-$OTHER_RECIPES}}" \
            --model "$model" --seeds 0 --batch-size 32 --seq-len 1024 --steps "${XO_STEPS:-30}" --warmup 10 \
            --synthetic --repeats 1 --timeout-per-run "${XO_TIMEOUT:-240}" --output-dir "$E/crossover/$model" \
            --resume --report
        dirs+=("$E/crossover/$model")
    done
    part crossover-report 60 python3 -m parallax crossover "${XO_BASE:-$E/matrix/bench}" "${dirs[@]}" \
        --output-dir "$E/crossover/report"
}

run_boundtests() { gpu_tests boundtests "${BOUNDTESTS_S:-200}" -s tests/gpu/test_layer_error_bounds_gpu.py; }

run_tejax() {
    gpu_tests tejax 240 tests/gpu/test_jax_te_gpu.py
}

run_nvfp4() {  # the GPU tests and the kernel benchmark unless the kernels and quantbench parts ran them
    local n=$E/nvfp4
    [[ $DONE_PARTS == *" kernels "* ]] || gpu_tests nvfp4-tests 400 tests/gpu/test_quant_cuda_gpu.py \
        tests/gpu/test_nvfp4_emulated_gpu.py
    [[ $DONE_PARTS == *" quantbench "* ]] || quant_bench nvfp4-quantbench 120 "$n/quantbench"
    part nvfp4-profile-torch 180 python3 scripts/device/profile_step.py --framework torch --recipe emulated-nvfp4 \
        --out "$n/profile"
    part nvfp4-profile-jax 180 python3 scripts/device/profile_step.py --framework jax --recipe emulated-nvfp4 \
        --out "$n/profile"
    part nvfp4-bench 420 python3 -m parallax benchmark --frameworks torch,jax --precisions bf16 \
        --recipes emulated-nvfp4 "${SIZE[@]}" --steps 60 --warmup 20 --repeats "${NVFP4_REPEATS:-${REPEATS:-3}}" --data "$DATA" \
        --epochs 20 --timeout-per-run 200 --output-dir "$n/bench" --resume --report
    report_of "$n/bench"
}

run_nvfp4long() {  # issue 11's loss penalty: 1,000 steps, both engines, several seeds sharing the GPU
    local n=$E/nvfp4long
    resume_from "${NVFP4_FROM:-}" "$n/bench"  # e.g. docs/results/2026-12-02-h200-b/nvfp4long/bench
    part nvfp4long "${NVFP4_LONG_S:-900}" python3 -m parallax benchmark --frameworks torch,jax --precisions bf16 \
        --recipes emulated-nvfp4 --model llama-100m --seeds "${NVFP4_SEEDS:-0,1}" --batch-size 32 --seq-len 1024 \
        --steps 1000 --warmup 20 --repeats 1 --data "$DATA" --epochs 40 --eval-every 100 --eval-batches 5 \
        --concurrent 8 --timeout-per-run 670 --output-dir "$n/bench" --resume --report
    report_of "$n/bench"
}

run() { "run_$1"; DONE_PARTS+="$1 "; }

# ------------------------------------------------------------------------------ setup, then the parts
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
    want fp8tests && run fp8tests_flax
    for p in $NO_TE_PARTS; do  # while TE builds (or has not come yet): the parts that do not need it
        want $p || continue
        [[ $(te_state) == building || $(te_state) == waiting ]] || break
        run $p
    done
    if want matrix || want tejax || want fp8tests || want boundtests || want conv || want crossover; then
        wait_te
        want boundtests && run boundtests
        want fp8tests && run fp8tests
        want tejax && run tejax
        want conv && run conv
        want matrix && run matrix
        want crossover && run crossover
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
            # back as soon as parallax and MaxText are in, so that the next call brings .carry/gpu
            wait_for "$E/setup.done" "${START_WAIT_S:-150}"
        fi
        report; exit 0 ;;
    stage)  # take the bundles this call brought; the pipeline starts with a later `start`
        adopt
        ls "$E/carry"; exit 0 ;;
    wait)
        adopt
        wait_for "$E/DONE" "${WAIT_S:-560}"
        report; exit 0 ;;
    pipeline) settings "${2:-1440}"; pipeline ;;
    *) echo "usage: $0 stage | start [BUDGET_S] | wait   (DRY_RUN=1 $0 pipeline [BUDGET_S]: print the parts)"; exit 2 ;;
esac
