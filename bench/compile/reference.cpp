// Compile benchmark reference (bench/compile_bench.py): template-heavy C++ that does not include
// ctgraph (xtensor expressions in float and double, the standard library's containers and
// algorithms). Its compile time measures the host and the compiler, not ctgraph: the benchmark's
// creep check compares each program's time to this one's, compiled in the same run.
#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include <xtensor/xmath.hpp>
#include <xtensor/xsort.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

template <class T>
T layer(std::size_t n, unsigned seed) {
    xt::xtensor<T, 2> a = xt::zeros<T>({n, n});
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < n; ++j) a(i, j) = T((i * 31 + j * 17 + seed) % 101) / T(101);
    xt::xtensor<T, 2> b = xt::tanh(a * T(0.5) + T(0.1)) - xt::exp(-a) / (T(1) + xt::abs(a));
    xt::xtensor<T, 1> rows = xt::sum(b, {1});
    xt::xtensor<T, 1> cols = xt::amax(b, {0});
    xt::xtensor<T, 2> c = xt::view(b, xt::range(1, n - 1), xt::all()) * xt::view(rows, xt::range(1, n - 1), xt::newaxis());
    auto sorted = xt::sort(xt::flatten(c));
    return xt::sum(sorted)() + xt::mean(cols)() + xt::variance(rows)();
}

template <class T>
std::map<std::string, T> report(const std::vector<std::size_t>& sizes) {
    std::map<std::string, T> out;
    for (std::size_t n : sizes) out["n" + std::to_string(n)] = layer<T>(n, unsigned(n));
    std::vector<T> v;
    for (const auto& [k, x] : out) v.push_back(x);
    std::sort(v.begin(), v.end());
    out["total"] = std::accumulate(v.begin(), v.end(), T(0));
    return out;
}

int main() {
    const auto f = report<float>({8, 16, 32});
    const auto d = report<double>({8, 16, 32});
    std::printf("%.4f %.4f\n", double(f.at("total")), d.at("total"));
    return 0;
}
