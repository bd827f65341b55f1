#!/usr/bin/env bash
# Formats every C++ source the repository tracks (*.cc, *.h) with .clang-format (clang-format 14,
# Debian 12's package clang-format-14, which scripts/setup.sh installs).
#   scripts/format.sh           rewrites the files in place
#   scripts/format.sh --check   changes nothing; lists each file that is not formatted and fails
#                               (scripts/test.sh runs this)
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
  esac
done
clang_format=${CLANG_FORMAT:-clang-format-14}
if ! command -v "$clang_format" >/dev/null; then
  echo "format: $clang_format not found. HINT: scripts/setup.sh installs it (Debian: clang-format-14)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files -- '*.cc' '*.h')
if [ "$check" = 0 ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -n 50 "$clang_format" -i
  echo "format: formatted ${#files[@]} files"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$clang_format" --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format: ${#bad[@]} of ${#files[@]} files are not formatted as .clang-format says:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "HINT: scripts/format.sh formats them (then review and commit the change)" >&2
  exit 1
fi
echo "format: all ${#files[@]} C++ files are formatted"
