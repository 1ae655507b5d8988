#!/bin/sh
# The tree stays readable: no source file over 700 lines of code (lines that
# are neither blank nor only a // comment), no function of 150 lines or more
# (tests/function_lengths.awk). Each failure names the file, line and size.
. "$MIST_SRCDIR/tests/lib.sh"
cd "$MIST_SRCDIR" || exit 1
awkprog="$MIST_SRCDIR/tests/function_lengths.awk"
sources=$(find base expr kernels models planner runtime tools tests benchmarks \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)
count=$(echo "$sources" | grep -c .)

# code lines of one file: not blank, not only a // comment
code_lines() { grep -v '^[ \t]*$' "$1" | grep -cv '^[ \t]*//'; }
long_files=""; largest_file=0; largest_name=""
for f in $sources; do
    n=$(code_lines "$f")
    [ "$n" -gt 700 ] && long_files="$long_files$f: $n lines of code
"
    [ "$n" -gt "$largest_file" ] && largest_file=$n && largest_name=$f
done
[ -z "$long_files" ] && [ "$count" -gt 100 ]
tap_ok $? "no source file over 700 lines of code ($count files; the largest: $largest_name, $largest_file)"
[ -z "$long_files" ] || tap_diag "$long_files"

# shellcheck disable=SC2086
long_functions=$(awk -v lim=149 -f "$awkprog" $sources)
# shellcheck disable=SC2086
largest_fn=$(awk -v lim=60 -f "$awkprog" $sources | sort -t: -k3 -n | tail -n 1)
[ -z "$long_functions" ]
tap_ok $? "no function of 150 lines or more (the largest: ${largest_fn:-none over 60 lines})"
[ -z "$long_functions" ] || tap_diag "$long_functions"

# the counters find what they should
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
{
    echo '/* a { brace in a comment'
    echo '   } */'
    echo 'static const int table[] = {'
    i=0; while [ $i -lt 200 ]; do echo "    $i,"; i=$((i + 1)); done
    echo '};'
    echo 'static int long_one(int a,'
    echo '                    int b) {'
    i=0; while [ $i -lt 149 ]; do echo '    a += b; // } not a close'; i=$((i + 1)); done
    echo '}'
    echo 'int short_one(void) {'
    i=0; while [ $i -lt 148 ]; do echo '    if (x) { y("}"); }'; i=$((i + 1)); done
    echo '}'
} >"$tmp/planted.c"
found=$(awk -v lim=150 -f "$awkprog" "$tmp/planted.c")
[ "$(echo "$found" | grep -c .)" -eq 1 ] && echo "$found" | grep -q 'planted.c:206: 151 lines: static int long_one'
tap_ok $? "the function counter flags a 151-line function with a two-line header, not a 150-line one nor a 202-line initialiser"
[ "$(echo "$found" | grep -c .)" -eq 1 ] || tap_diag "$found"
printf 'int a;\n\n   // only a comment\nint b; // code with a comment\n' >"$tmp/lines.c"
[ "$(code_lines "$tmp/lines.c")" -eq 2 ]
tap_ok $? "code lines leave out blank and comment-only lines (2 of 4)"
tap_end
