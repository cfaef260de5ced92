# Sourced by run_benchmarks.sh and setup_remote_gpu.sh: `run CMD...` runs a command, or with
# DRY_RUN=1 prints it instead (`show`: arguments quoted where they hold spaces or are empty).
show() {
    local out="" arg
    for arg in "$@"; do
        if [[ "$arg" =~ [[:space:]] || -z "$arg" ]]; then out+="'$arg' "; else out+="$arg "; fi
    done
    echo "${out% }"
}

run() {
    if [[ "${DRY_RUN:-0}" == 1 ]]; then show "$@"; else "$@"; fi
}
