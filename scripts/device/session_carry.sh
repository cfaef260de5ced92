# The bundles of a device lease (sourced by scripts/device/session.sh): each call copies those it carries into
# $E/carry once, the pipeline takes one it finds in the live checkout, and every call packs what exists into $OUT.
# A call brings back 8 files and 64 MiB at most: the tarball stays under 16 MiB, kept TE builds go in 15 MiB pieces.

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
