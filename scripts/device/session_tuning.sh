# Issue 35's parts (sourced by scripts/device/session.sh): each stack at its stock best and fed at full speed, and
# profile limits that hold. Run in this order by run_parts: `limits` first (it needs no TE: TE installs meanwhile),
# then after TE `tuning`, `feed` and `fp8profiles`.
#   limits       the measured HBM bandwidth's GPU test, then `parallax profile` of torch and jax bf16
#   tuning       plan `tuning` on real tokens (TUNING_ARGS="--tunings ..." trims its knob sets): the sweep, and the
#                README's cells (bf16 and each framework's fastest fp8 recipe, default and tuned) on one machine
#   feed         MaxText bf16 on synthetic tokens, the twin of the sweep's real-token MaxText bf16 default cell
#   fp8profiles  `parallax profile` of torch and jax te-fp8-delayed (the fp8 GEMMs that beat the old limit)

profile_of() {  # profile_of FRAMEWORK RECIPE: `parallax profile` into $E/limits/FRAMEWORK-RECIPE
    part "profile-$1-$2" "${PROFILE_S:-240}" python3 -m parallax profile --framework "$1" --recipe "$2" \
        --model llama-100m --output-dir "$E/limits/$1-$2"
}

run_limits() {
    part limits-tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu -rs tests/gpu/test_copy_bandwidth_gpu.py
    profile_of torch bf16
    profile_of jax bf16
}

run_tuning() {  # leaves RESERVE_S for each of feed and fp8profiles still wanted
    local todo=0 p
    for p in feed fp8profiles; do want $p && todo=$((todo + 1)); done
    bench tuning tuning/bench tuning $(($(left) - todo * RESERVE - 30)) --data "$DATA"
    report_of "$E/tuning/bench"
}

run_feed() {
    part feed-maxtext-synthetic 300 python3 -m parallax train --framework maxtext --precision bf16 \
        --model llama-100m --steps 60 --warmup 20 --seed 0 --synthetic --output-dir "$E/feed/maxtext-bf16-synthetic"
}

run_fp8profiles() {
    profile_of torch te-fp8-delayed
    profile_of jax te-fp8-delayed
}
