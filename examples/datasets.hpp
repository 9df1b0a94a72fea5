// examples/datasets.hpp: loading the small data sets shipped under data/ (with clear errors).
#pragma once
#include <algorithm>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>

#include <ctgraph/error.hpp>

namespace ctg::examples {

struct labelled_images {
    xt::xtensor<float, 2> x;  // (n, features), scaled to [0, 1]
    xt::xtensor<int, 1> y;    // (n)
};

/// Reads data/digits/digits.csv: 64 pixel values in 0..16, then the label 0..9, per line.
inline labelled_images load_digits(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw io_error("load_digits: cannot open '" + path + "'");
    std::vector<float> pixels;
    std::vector<int> labels;
    std::string line;
    std::size_t line_no = 0;
    while (std::getline(in, line)) {
        ++line_no;
        if (line.empty()) continue;
        std::stringstream ss(line);
        std::string cell;
        std::vector<double> row;
        while (std::getline(ss, cell, ',')) {
            try {
                std::size_t used = 0;
                row.push_back(std::stod(cell, &used));
                if (used != cell.size()) throw std::invalid_argument(cell);
            } catch (const std::exception&) {
                throw io_error("load_digits: '" + path + "' line " + std::to_string(line_no) + ": '" + cell +
                               "' is not a number");
            }
        }
        if (row.size() != 65)
            throw io_error("load_digits: '" + path + "' line " + std::to_string(line_no) + " has " +
                           std::to_string(row.size()) + " fields, expected 65 (64 pixels and a label)");
        for (int k = 0; k < 64; ++k) {
            if (row[k] < 0 || row[k] > 16)
                throw io_error("load_digits: '" + path + "' line " + std::to_string(line_no) + ": pixel " +
                               std::to_string(row[k]) + " is outside 0..16");
            pixels.push_back(float(row[k] / 16.0));
        }
        if (row[64] < 0 || row[64] > 9 || row[64] != int(row[64]))
            throw io_error("load_digits: '" + path + "' line " + std::to_string(line_no) + ": label " +
                           std::to_string(row[64]) + " is not a digit");
        labels.push_back(int(row[64]));
    }
    if (labels.empty()) throw io_error("load_digits: '" + path + "' holds no examples");
    labelled_images d;
    d.x = xt::xtensor<float, 2>::from_shape({labels.size(), 64});
    std::copy(pixels.begin(), pixels.end(), d.x.begin());
    d.y = xt::xtensor<int, 1>::from_shape({labels.size()});
    std::copy(labels.begin(), labels.end(), d.y.begin());
    return d;
}

/// A seeded permutation of 0..n-1.
inline std::vector<std::size_t> permutation(std::size_t n, unsigned long long seed) {
    std::vector<std::size_t> p(n);
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), std::mt19937_64(seed));
    return p;
}

/// Rows idx[first, first + count) of a data set.
inline labelled_images take(const labelled_images& d, const std::vector<std::size_t>& idx, std::size_t first,
                            std::size_t count) {
    labelled_images r;
    const std::size_t f = d.x.shape(1);
    r.x = xt::xtensor<float, 2>::from_shape({count, f});
    r.y = xt::xtensor<int, 1>::from_shape({count});
    for (std::size_t i = 0; i < count; ++i) {
        const std::size_t s = idx[first + i];
        std::copy(d.x.data() + s * f, d.x.data() + (s + 1) * f, r.x.data() + i * f);
        r.y(i) = d.y(s);
    }
    return r;
}

/// A seeded split: the first `fraction` of a shuffled order for training, the rest for testing.
inline std::pair<labelled_images, labelled_images> split(const labelled_images& d, double fraction,
                                                          unsigned long long seed) {
    const std::size_t n = d.y.size(), n_train = std::size_t(double(n) * fraction);
    const auto order = permutation(n, seed);
    return {take(d, order, 0, n_train), take(d, order, n_train, n - n_train)};
}

}  // namespace ctg::examples
