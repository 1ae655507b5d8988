# Prints "FILE:LINE: N lines: HEADER" for every C/CUDA function longer than
# lim lines (awk -v lim=150 -f tests/function_lengths.awk FILES...).
# A function is a top-level brace block whose header (the text since the
# previous top-level ";" or "}") has a "(" and no "=": that leaves out struct,
# enum and array initialisers. Comments, strings and preprocessor lines are
# blanked first so their braces do not count. Good enough for this tree's
# style (K&R braces); it is a size check, not a parser.
FNR == 1 { depth = 0; hdr = ""; isfn = 0; incomment = 0 }
{
    line = $0
    if (incomment) { if (sub(/^.*\*\//, "", line)) incomment = 0; else next }
    gsub(/\/\*.*\*\//, "", line)
    if (sub(/\/\*.*$/, "", line)) incomment = 1
    gsub(/\/\/.*$/, "", line)
    gsub(/"([^"\\]|\\.)*"/, "\"\"", line)
    gsub(/'([^'\\]|\\.)*'/, "''", line)
    if (line ~ /^[ \t]*#/) next
    n = length(line)
    for (i = 1; i <= n; i++) {
        c = substr(line, i, 1)
        if (c == "{") {
            if (depth == 0) {
                isfn = (hdr ~ /\(/ && hdr !~ /=/)
                start = FNR; name = hdr
            }
            depth++
        } else if (c == "}") {
            depth--
            if (depth == 0) {
                if (isfn && FNR - start + 1 > lim) {
                    gsub(/[ \t]+/, " ", name)
                    printf "%s:%d: %d lines:%s\n", FILENAME, start, FNR - start + 1, substr(name, 1, 80)
                }
                hdr = ""; isfn = 0
            }
        } else if (c == ";" && depth == 0) hdr = ""
        else if (depth == 0) hdr = hdr c
    }
    if (depth == 0) hdr = hdr " "
}
