// ctgraph/data.hpp: what ctg::trainer reads batches from (included by ctgraph/train.hpp).
//
// A batch source has `size()` samples and `feed(program, rows, n)`, which feeds the samples
// rows[0..n) to the program's inputs as one batch. Here: ctg::dataset (named columns of tensors
// held in memory), ctg::token_windows (next-token windows of one token stream), and
// ctg::mean_output (the mean of a program's scalar output over a source: a validation loss).
//
//   ctg::dataset<float> train{{"pixels", x}, {"labels", y}};
//   ctg::token_windows text(tokens, /*len*/ 128);          // window i: tokens[i, i + 128), targets shifted by one
#pragma once
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ctgraph/error.hpp"
#include "ctgraph/graph/elements.hpp"
#include "ctgraph/tensor.hpp"

namespace ctg {

/// What the trainer reads batches from: `size()` samples, and `feed(prog, rows, n)` feeding the
/// samples rows[0..n) to the program's inputs as one batch.
template <class D, class Program>
concept batch_source = requires(D& d, Program& p, const std::size_t* rows, std::size_t n) {
    { d.size() } -> std::convertible_to<std::size_t>;
    d.feed(p, rows, n);
};

/// One named column of a dataset: the values of one program input for every sample, the first axis
/// indexing samples. Integer tensors become index data (token ids, class labels), others scalars.
template <class T>
struct column {
    std::string name;  ///< the program input it feeds
    bool is_index = false;  ///< integer data (fed to an index_input)
    rshape shape{};  ///< all samples; shape.d[0] is the number of samples
    std::vector<T> values{};  ///< the floating-point samples (when not is_index)
    std::vector<index_t> indices{};  ///< the integer samples (when is_index)

    /// Copies a tensor (samples first, rank 1 to 4) as input `input_name`'s column: an xtensor
    /// container or expression, or any type with shape() and row-major begin()/end(). Throws
    /// ctg::shape_error for another rank, ctg::index_error for an integer outside int32.
    template <class E>
        requires requires(const E& e) { e.shape(); e.begin(); }
    column(std::string input_name, const E& d) : name(std::move(input_name)) {
        const std::size_t rank = d.shape().size();
        if (rank == 0 || rank > max_rank)
            throw shape_error("ctg::column '" + name + "': needs rank 1 to " + std::to_string(max_rank) +
                              " (samples first), got rank " + std::to_string(rank));
        shape.rank = rank;
        for (std::size_t a = 0; a < shape.rank; ++a) shape.d[a] = d.shape()[a];
        is_index = std::is_integral_v<std::remove_cvref_t<decltype(*d.begin())>>;
        if (is_index) {
            indices.resize(shape.size());
            detail::for_each_row_major(d, [&](std::size_t k, auto v) {
                const long long id = static_cast<long long>(v);
                if (id < std::numeric_limits<index_t>::min() || id > std::numeric_limits<index_t>::max())
                    throw index_error("ctg::column '" + name + "': element " + std::to_string(k) + " = " +
                                      std::to_string(id) + " does not fit int32");
                indices[k] = index_t(id);
            });
        } else {
            values.resize(shape.size());
            detail::for_each_row_major(d, [&](std::size_t k, auto v) { values[k] = T(v); });
        }
    }
    std::size_t samples() const { return shape.d[0]; }  ///< the number of samples
    std::size_t row_size() const { return shape.size() / std::max<std::size_t>(1, shape.d[0]); }  ///< the elements of one sample
};

/// Samples held in memory as named columns, one per program input: dataset<float> d{{"x", X}, {"y", Y}}.
/// Every column has the same number of samples. feed() gathers the chosen rows into a batch buffer
/// (allocated once, at the largest batch) and feeds the program by input name.
template <class T>
class dataset {
public:
    /// The columns, e.g. `{{"pixels", X}, {"labels", Y}}`. Throws ctg::error when empty and
    /// ctg::shape_error when the columns' numbers of samples differ.
    dataset(std::initializer_list<column<T>> cols) : cols_(cols) {
        if (cols_.empty()) throw error("ctg::dataset: give at least one column");
        for (const auto& c : cols_)
            if (c.samples() != cols_[0].samples())
                throw shape_error("ctg::dataset: column '" + c.name + "' has " + std::to_string(c.samples()) +
                                  " samples but column '" + cols_[0].name + "' has " +
                                  std::to_string(cols_[0].samples()));
        buffers_.resize(cols_.size());
        index_buffers_.resize(cols_.size());
    }

    std::size_t size() const { return cols_[0].samples(); }  ///< the number of samples
    const std::vector<column<T>>& columns() const { return cols_; }  ///< the columns

    /// Feeds samples rows[0..n) of every column to program `p` by input name, as one batch (first axis n).
    /// Throws ctg::index_error for a row past the end.
    template <class Program>
    void feed(Program& p, const std::size_t* rows, std::size_t n) {
        for (std::size_t c = 0; c < cols_.size(); ++c) {
            const column<T>& col = cols_[c];
            const std::size_t row = col.row_size();
            rshape s = col.shape;
            s.d[0] = n;
            for (std::size_t k = 0; k < n; ++k)
                if (rows[k] >= col.samples())
                    throw index_error("ctg::dataset::feed: sample " + std::to_string(rows[k]) + " of column '" +
                                      col.name + "' (" + std::to_string(col.samples()) + " samples)");
            if (col.is_index) {
                auto& b = index_buffers_[c];
                if (b.size() < n * row) b.resize(n * row);
                for (std::size_t k = 0; k < n; ++k)
                    std::copy_n(col.indices.data() + rows[k] * row, row, b.data() + k * row);
                p.feed(col.name, static_cast<const index_t*>(b.data()), s);
            } else {
                auto& b = buffers_[c];
                if (b.size() < n * row) b.resize(n * row);
                for (std::size_t k = 0; k < n; ++k) std::copy_n(col.values.data() + rows[k] * row, row, b.data() + k * row);
                p.feed(col.name, static_cast<const T*>(b.data()), s);
            }
        }
    }

private:
    std::vector<column<T>> cols_;
    std::vector<std::vector<T>> buffers_;
    std::vector<std::vector<index_t>> index_buffers_;
};

/// Next-token samples from one token stream: sample i is the window tokens[i*stride, i*stride + len)
/// fed as `input`, and the same window shifted by one token fed as `target`. stride 1 gives every
/// window (training: an epoch sees each start position once, in shuffled order); stride = len gives
/// the disjoint windows (evaluation).
class token_windows {
public:
    /// Windows of `len` tokens every `stride` tokens, fed as inputs `input` (B, len) and `target` (B, len).
    /// Throws ctg::error for a zero length or stride, ctg::shape_error when the stream is shorter than len + 1.
    token_windows(std::vector<index_t> tokens, std::size_t len, std::size_t stride = 1, std::string input = "tokens",
                  std::string target = "targets")
        : tokens_(std::move(tokens)), len_(len), stride_(stride), input_(std::move(input)), target_(std::move(target)) {
        if (len_ == 0 || stride_ == 0) throw error("ctg::token_windows: the window length and stride must be positive");
        if (tokens_.size() < len_ + 1)
            throw shape_error("ctg::token_windows: " + std::to_string(tokens_.size()) +
                              " tokens are too few for one window of " + std::to_string(len_) + " plus its target");
    }
    std::size_t size() const { return (tokens_.size() - len_ - 1) / stride_ + 1; }  ///< the number of windows
    std::size_t tokens_per_sample() const { return len_; }  ///< len: the tokens of one window (for tokens/s)
    const std::vector<index_t>& tokens() const { return tokens_; }  ///< the token stream

    /// Feeds windows rows[0..n) and their targets as one batch; throws ctg::index_error for a window past the end.
    template <class Program>
    void feed(Program& p, const std::size_t* rows, std::size_t n) {
        if (x_.size() < n * len_) x_.resize(n * len_), y_.resize(n * len_);
        for (std::size_t k = 0; k < n; ++k) {
            if (rows[k] >= size())
                throw index_error("ctg::token_windows::feed: window " + std::to_string(rows[k]) + " of " +
                                  std::to_string(size()));
            const index_t* w = tokens_.data() + rows[k] * stride_;
            std::copy_n(w, len_, x_.data() + k * len_);
            std::copy_n(w + 1, len_, y_.data() + k * len_);
        }
        p.feed(input_, static_cast<const index_t*>(x_.data()), rshape{2, {n, len_}});
        p.feed(target_, static_cast<const index_t*>(y_.data()), rshape{2, {n, len_}});
    }

private:
    std::vector<index_t> tokens_;
    std::size_t len_, stride_;
    std::string input_, target_;
    std::vector<index_t> x_, y_;
};

/// The mean of the program's scalar output over every sample of `data`, in order, in batches of
/// `batch` (each batch's loss weighted by its size): a validation loss.
template <class Program, class Data>
double mean_output(Program& p, Data& data, std::size_t batch) {
    const std::size_t n = data.size();
    if (n == 0) throw error("ctg::mean_output: the data set is empty");
    std::vector<std::size_t> rows(std::min(batch, n));
    double sum = 0;
    for (std::size_t b = 0; b < n; b += batch) {
        const std::size_t m = std::min(batch, n - b);
        std::iota(rows.begin(), rows.begin() + long(m), b);
        data.feed(p, rows.data(), m);
        sum += double(p.forward()) * double(m);
    }
    return sum / double(n);
}

}  // namespace ctg
