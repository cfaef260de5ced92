# TransformerEngine's bundle, .carry/gpu (sourced by scripts/device/session.sh): installed in the background at
# the first part boundary after it came, waited for before the parts that need it, or given up on (GPU_BY_S,
# TE_WAIT_S); the framework extensions it built are kept for later leases (they fit only this image).

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
