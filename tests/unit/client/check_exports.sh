#!/bin/sh
# The functions libgemmclient.so exports are exactly the GC_EXPORT functions of gemmclient.h:
# nothing internal leaks (gc__, gp_ of the proto code linked in), nothing declared is missing.
#   check_exports.sh LIBGEMMCLIENT.so gemmclient.h
set -eu
lib=$1 header=$2
exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" || $2 == "D" || $2 == "B" {print $3}' \
           | grep -v '^_' | sort)
declared=$(grep -v '^#' "$header" | tr '\n' ' ' | grep -o 'GC_EXPORT [^(;]*(' \
           | sed 's/($//; s/.*[ *]//' | sort)
if [ "$exported" != "$declared" ]; then
  echo "exported by $lib but not declared GC_EXPORT in $header:"
  echo "$exported" | grep -vxF "$declared" || true
  echo "declared GC_EXPORT in $header but not exported by $lib:"
  echo "$declared" | grep -vxF "$exported" || true
  exit 1
fi
echo "$(echo "$exported" | wc -l) gc_ functions exported, all declared"
