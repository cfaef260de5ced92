# The pipeline's parts (sourced by scripts/device/session.sh): run_<part> for each name PARTS may hold. A benchmark
# part is a plan (src/parallax/plans/, `parallax benchmark --list-plans`); GPU tests are one list; the rest are scripts.

run_capture_train() {  # CAPTURE_TRAIN=0 skips it: the matrix's maxtext runs keep the same files
    local c=$1
    part capture-bf16 300 python3 -m parallax train --framework maxtext --precision bf16 --model llama-100m \
        --synthetic --steps 30 --warmup 10 --output-dir "$c/train-bf16" --overwrite
    part capture-fp8 300 python3 -m parallax train --framework maxtext --precision fp8 --model llama-100m \
        --synthetic --steps 30 --warmup 10 --output-dir "$c/train-fp8" --overwrite
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
    mkdir -p "$(dirname "$2")" && cp -a "$1" "$2" && log "$(basename "$2"): resuming $1"
}

report_of() {  # a benchmark cut at its limit wrote no report: compare writes it from the finished cells
    ((DRY)) || [[ ! -f $1/report.md ]] || return 0
    part "$(basename "$(dirname "$1")")-report" 60 python3 -m parallax compare --results-dir "$1" \
        --output-report "$1/report.md"
}

bench() {  # bench PART DIR PLAN LIMIT_S [ARG...]: `parallax benchmark --plan PLAN ARG...` into $E/DIR, resumed. The
    # environment changes it by the part's name in capitals (- as _): PART_PLAN another plan, PART_ARGS options
    # that replace the plan's (e.g. MATRIX_ARGS="--repeats 3"), PART_FROM a committed benchmark to resume (copied
    # to $E/DIR first), PART_S the part's limit
    local key=${1^^} extra=()
    key=${key//-/_}
    local plan=${key}_PLAN args=${key}_ARGS from=${key}_FROM limit=${key}_S
    read -ra extra <<< "${!args:-}"
    resume_from "${!from:-}" "$E/$2"
    part "$1" "${!limit:-$4}" python3 -m parallax benchmark --plan "${!plan:-$3}" "${@:5}" "${extra[@]}" \
        --output-dir "$E/$2"
}

run_matrix() {  # after TE, on a quiet GPU; leaves RESERVE_S for each part still to come
    local todo=0 p
    for p in $NO_TE_PARTS crossover nvfp4; do want $p && [[ $DONE_PARTS != *" $p "* ]] && todo=$((todo + 1)); done
    bench matrix matrix/bench three-frameworks $(($(left) - todo * RESERVE - 60)) --data "$DATA"
    report_of "$E/matrix/bench"
}

# convbase runs the bf16 twins while TE builds, conv adds the TE recipes to the same benchmark after it: give
# CONVBASE_ARGS and CONV_ARGS the same frameworks and seeds (a resumed benchmark may only grow)
run_convbase() { bench convbase conv/bench convergence 400 --data "$DATA" --recipes ""; }

run_conv() {
    bench conv conv/bench convergence 400 --data "$DATA"
    DONE_PARTS+="convbase "  # its cells are in this benchmark now
    report_of "$E/conv/bench"
}

run_curves() { bench curves curves/bench curves 500 --data "$DATA"; report_of "$E/curves/bench"; }

run_crossover() {  # one benchmark per preset of the plan into crossover/<preset>, then `parallax crossover` of them
    local d dirs=()
    bench crossover crossover crossover 1200
    for d in "$E"/crossover/*/matrix.json; do [[ -f $d ]] && dirs+=("$(dirname "$d")"); done
    part crossover-report 60 python3 -m parallax crossover ${CROSSOVER_BASE:+"$CROSSOVER_BASE"} "${dirs[@]}" \
        --output-dir "$E/crossover/report"
}

run_nvfp4() {  # the GPU tests and the kernel benchmark unless the kernels and quantbench parts ran them
    local n=$E/nvfp4
    [[ $DONE_PARTS == *" kernels "* ]] || gpu_tests nvfp4-tests
    [[ $DONE_PARTS == *" quantbench "* ]] || quant_bench nvfp4-quantbench 120 "$n/quantbench"
    part nvfp4-profile-torch 180 python3 -m parallax profile --framework torch --recipe emulated-nvfp4 \
        --output-dir "$n/profile/torch-emulated-nvfp4"
    part nvfp4-profile-jax 180 python3 -m parallax profile --framework jax --recipe emulated-nvfp4 \
        --output-dir "$n/profile/jax-emulated-nvfp4"
    bench nvfp4-bench nvfp4/bench nvfp4-emulation 420 --data "$DATA"
    report_of "$n/bench"
}

run_nvfp4long() { bench nvfp4long nvfp4long/bench nvfp4-long 900 --data "$DATA"; report_of "$E/nvfp4long/bench"; }

gpu_tests() {  # gpu_tests NAME: that part's GPU tests under its limit
    local a
    case $1 in
        kernels) a=(300 tests/gpu/test_quant_cuda_gpu.py tests/gpu/test_nvfp4_emulated_gpu.py) ;;
        nvfp4-tests) a=(400 tests/gpu/test_quant_cuda_gpu.py tests/gpu/test_nvfp4_emulated_gpu.py) ;;
        kernels16) a=(150 tests/gpu/test_quant_cuda_gpu.py tests/gpu/test_nvfp4_emulated_gpu.py
                      -k "16x1 or jax_ffi or counter_qdq or linears_have") ;;  # the 16x1 kernels and their users
        fp8tests-flax) a=(240 tests/gpu/test_jax_fp8_gpu.py) ;;  # needs no TE: while it builds
        fp8tests) a=(360 tests/gpu/test_torch_fp8_gpu.py tests/gpu/test_jax_te_gpu.py) ;;
        boundtests) a=("${BOUNDTESTS_S:-200}" -s tests/gpu/test_layer_error_bounds_gpu.py) ;;  # -s: each ratio
        tejax) a=(240 tests/gpu/test_jax_te_gpu.py) ;;
        mxtests) a=(150 tests/gpu/test_mx_cuda_gpu.py) ;;  # the MX kernels: CUDA bit for bit the host's
        bandtests) a=(360 -s -k band tests/gpu/test_torch_fp8_gpu.py tests/gpu/test_jax_te_gpu.py  # every recipe's
                      tests/gpu/test_jax_fp8_gpu.py tests/gpu/test_nvfp4_emulated_gpu.py) ;;  # loss band of bf16
    esac
    local k=${1^^}_K  # e.g. BOUNDTESTS_K="te_jax": only those tests
    k=${k//-/_}
    [[ -z ${!k:-} ]] || a+=(-k "${!k}")
    part "$1" "${a[0]}" python3 -m pytest -q -p no:cacheprovider -m gpu -rs "${a[@]:1}"
}
run_kernels() { gpu_tests kernels; }
run_kernels16() { gpu_tests kernels16; }
run_fp8tests_flax() { gpu_tests fp8tests-flax; }
run_fp8tests() { gpu_tests fp8tests; }
run_boundtests() { gpu_tests boundtests; }
run_bandtests() { gpu_tests bandtests; }
run_tejax() { gpu_tests tejax; }
run_mxtests() { gpu_tests mxtests; }

run_profile() {  # parallax profile of our jax step, more jax recipes and MaxText's, each beside jax bf16
    local p=$E/profile r
    part profile-jax 180 python3 -m parallax profile --framework jax --recipe bf16 --output-dir "$p/jax-bf16" \
        --keep-trace
    for r in ${PROFILE_JAX:-}; do
        part "profile-jax-$r" 180 python3 -m parallax profile --framework jax --recipe "$r" --output-dir "$p/jax-$r" \
            --keep-trace
        part "profile-compare-jax-$r" 30 python3 -m parallax profile --compare "$p/jax-bf16/profile.json" \
            "$p/jax-$r/profile.json" --output-dir "$p/compare-jax-$r"
    done
    for r in ${PROFILE_MAXTEXT-bf16}; do
        part "profile-maxtext-$r" 300 python3 -m parallax profile --framework maxtext --recipe "$r" \
            --output-dir "$p/maxtext-$r" --keep-trace
        part "profile-compare-$r" 30 python3 -m parallax profile --compare "$p/jax-bf16/profile.json" \
            "$p/maxtext-$r/profile.json" --output-dir "$p/compare-maxtext-$r"
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
