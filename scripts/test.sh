#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs the whole test suite with CTest.
#
#   scripts/test.sh                       g++, Release: the README's command
#   scripts/test.sh --cxx clang++         another compiler (clang++, clang++-16, g++-12, ...)
#   scripts/test.sh --debug               CMAKE_BUILD_TYPE=Debug (-O0 -g)
#   scripts/test.sh --sanitize            AddressSanitizer + UndefinedBehaviorSanitizer (any error fails the
#                                         test that hit it; leaks too); with --debug, what CI runs
#   scripts/test.sh --build-dir DIR       where to build (default: build, or build-<cxx>[-debug])
#   scripts/test.sh --no-header-check     skip compiling each public header alone (CI does it once)
#   scripts/test.sh --no-docs             skip the API reference check (scripts/docs.sh; CI runs it once)
#   scripts/test.sh --short-examples      the examples' short runs (as in Debug) instead of their full
#                                         trainings (CI runs those once)
#   scripts/test.sh --skip-tests REGEX    leave out the tests whose names match (ctest -E): CI's later
#                                         configurations skip the checks the first one already ran with
#                                         the same compilers (compile-fail messages, install, layers)
#   scripts/test.sh --only NAME,NAME,...  build only these programs and checks and run only their tests
#                                         (CMake's CTG_ONLY: test_engine, char_lm, ctg-bench, fuzz, ...)
#
# CI (.ci/run) runs three configurations: g++ Release, clang Release under ASan + UBSan, g++ Debug.
set -euo pipefail
cd "$(dirname "$0")/.."
cxx=g++ build_type=Release dir="" sanitize=0 docs=1 only=""
flags=() ctest_flags=()
while (($#)); do
  case "$1" in
    --cxx) cxx=$2; shift 2 ;;
    --debug) build_type=Debug; shift ;;
    --sanitize) sanitize=1; shift ;;
    --no-header-check) flags+=(-DCTG_HEADER_CHECK=OFF); shift ;;
    --no-docs) docs=0; shift ;;
    --short-examples) flags+=(-DCTG_LONG_EXAMPLES=OFF); shift ;;
    --build-dir) dir=$2; shift 2 ;;
    --skip-tests) ctest_flags+=(-E "$2"); shift 2 ;;
    --only) only=${2//,/;}; shift 2 ;;
    *) echo "scripts/test.sh: unknown option '$1' (see the comment at the top)" >&2; exit 2 ;;
  esac
done
if [[ -z $dir ]]; then
  dir=build
  [[ $cxx != g++ ]] && dir="build-$cxx"
  [[ $build_type == Debug ]] && dir="$dir-debug"
  ((sanitize)) && dir="$dir-asan"
fi
if ((sanitize)); then
  flags+=(-DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer")
  # The test programs unoptimised (the library's compiled part, in ctgraph::ctgraph, keeps the build's
  # -O3): instrumented test code compiles three times faster at -O0 than at -O1 (clang, the tests
  # CI sanitizes: 104 against 245 CPU-s; test_recompute 8.5 against 26.8 s), and their runs, 2.4
  # times longer, cost less than that (50 against 21 s); unoptimised code hides no access from the
  # sanitizers.
  [[ $build_type == Release ]] && flags+=(-DCTG_TEST_OPT=-O0)
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi
# The compiler's Debian package: clang++ -> clang, clang++-16 -> clang-16, g++-12 -> g++-12.
pkg=${cxx/clang++/clang}
scripts/setup.sh "$pkg"
CXX=$cxx cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$build_type" -DCTG_ONLY="$only" "${flags[@]}"
# The API reference (a few seconds): fails on an undocumented public entity or a Doxygen warning in a header.
if ((docs)) && command -v doxygen >/dev/null; then
  scripts/docs.sh "$dir"
fi
cmake --build "$dir" -j"$(nproc)"
# all targets are built first: catch_discover_tests would otherwise register *_NOT_BUILT tests
ctest --test-dir "$dir" -j"$(nproc)" --output-on-failure "${ctest_flags[@]}"
