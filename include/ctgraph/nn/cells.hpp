// ctgraph/nn/cells.hpp: recurrent cells built from primitives (their backward is generated).
//
// Each cell is a struct template over a name prefix and sizes; its parameters are named
// "<prefix>_W_x", ... so two layers with different prefixes have different weights and the same
// prefix means the same weights. Row-vector form: the seed article's W_h h_{t-1} + W_x x_t + b is
// h_{t-1} W_h + x_t W_x + b here, with W stored (in, out) - PyTorch's weight transposed.
//
//   Cell::project(xs)   the input projection of the whole sequence, one GEMM outside the loop:
//                       (T, B, X) -> (T, B, G) with G = H (Elman), 3H (GRU), 4H (LSTM)
//   Cell::step(s, p)    one step on a projected input p (what scan runs)
//   Cell::cell(s, x)    one step on a raw input x (project inside the step)
//   Cell::run(xs, ...)  scan over the sequence: (T, B, X) -> (T, B, H); forwards h0 and lengths to scan
//
// nn::bidirectional<Fwd, Bwd> runs two cells in opposite directions; nn::stacked_recurrent<L0, L1, ...>
// runs layers one over the other (PyTorch's num_layers).
//
// GRU and LSTM follow PyTorch's equations and gate order (GRU: r, z, n; LSTM: i, f, g, o), so their
// weights exchange with torch.nn.GRU / nn.LSTM by transposing.
#pragma once
#include "ctgraph/graph/scan.hpp"
#include "ctgraph/nn/checks.hpp"
#include "ctgraph/ops/add.hpp"
#include "ctgraph/ops/affine.hpp"
#include "ctgraph/ops/concat.hpp"
#include "ctgraph/ops/gru_gates.hpp"
#include "ctgraph/ops/lstm_gates.hpp"
#include "ctgraph/ops/matmul.hpp"
#include "ctgraph/ops/mul.hpp"
#include "ctgraph/ops/relu.hpp"
#include "ctgraph/ops/sigmoid.hpp"
#include "ctgraph/ops/slice.hpp"
#include "ctgraph/ops/sub.hpp"
#include "ctgraph/ops/tanh.hpp"

namespace ctg {

/// 1 - x.
template <expr A>
constexpr auto one_minus(A a) { return sub(constant<1>{}, a); }

namespace nn {

/// A layer's non-linearity: tanh, ReLU, GELU's tanh approximation (GPT-2) or GELU's exact erf form
/// (PyTorch's nn.GELU() and activation="gelu" of its Transformer layers).
enum class activation { tanh, relu, gelu, gelu_erf };

/// What every cell offers once it has project() and step(): one raw step, and the scan.
template <class Cell, int StateWidth>
struct recurrent {
    /// One step on a raw input x (B, X): the state after it (B, StateWidth).
    static constexpr auto cell(auto s, auto x) { return Cell::step(s, Cell::project(x)); }
    /// The scan over xs (T, B, X): every step's whole state (T, B, StateWidth). `extra` is passed to
    /// ctg::scan: an initial state (or zero_state{}) and per-sequence lengths (an index_input (B)).
    template <class... Extra>
    static constexpr auto run_state(auto xs, Extra... extra) {
        return scan<StateWidth>([](auto s, auto p) { return Cell::step(s, p); }, Cell::project(xs), extra...);
    }
    /// The scan over xs (T, B, X): every step's output (T, B, H); as run_state() but for the LSTM.
    template <class... Extra>
    static constexpr auto run(auto xs, Extra... extra) { return run_state(xs, extra...); }
};

/// The weights of a gated cell with G gates of width H (PyTorch's layout, transposed):
/// `<P>_W_i` (X, G*H), `<P>_W_h` (H, G*H), `<P>_b_i` and `<P>_b_h` (G*H).
template <fixed_string P, int X, int H, int G>
struct gate_weights {
    using W_i = param<P + fixed_string("_W_i"), X, G * H>;  ///< `<P>_W_i` (X, G*H): the input's weights of every gate
    using W_h = param<P + fixed_string("_W_h"), H, G * H>;  ///< `<P>_W_h` (H, G*H): the state's weights of every gate
    using b_i = param<P + fixed_string("_b_i"), G * H>;     ///< `<P>_b_i` (G*H): the input side's bias
    using b_h = param<P + fixed_string("_b_h"), G * H>;     ///< `<P>_b_h` (G*H): the state side's bias
    /// The input's part of every gate: x W_i + b_i.
    template <expr Xs>
    static constexpr auto project(Xs xs) {
        if constexpr (Xs::is_poison) return poison{};
        else if constexpr (!detail::cell_input_fits<W_i::name, X, G * H, detail::last_dim<Xs>>()) return poison{};
        else return affine(xs, W_i{}, b_i{});
    }
    /// The state's part of every gate: h W_h + b_h.
    static constexpr auto recurrent_part(auto h) { return affine(h, W_h{}, b_h{}); }
};

/// Elman: h_t = phi(h_{t-1} W_h + x_t W_x + b), phi = tanh or relu.
template <fixed_string P, int X, int H, activation Phi = activation::tanh>
struct elman : recurrent<elman<P, X, H, Phi>, H> {
    using W_x = param<P + fixed_string("_W_x"), X, H>;  ///< `<P>_W_x` (X, H): the input's weights
    using W_h = param<P + fixed_string("_W_h"), H, H>;  ///< `<P>_W_h` (H, H): the state's weights
    using b = param<P + fixed_string("_b"), H>;         ///< `<P>_b` (H): the bias
    /// The activation, tanh or relu.
    static constexpr auto phi(auto a) {
        static_assert(Phi == activation::tanh || Phi == activation::relu, "ctg::nn::elman: the activation is tanh or relu");
        if constexpr (Phi == activation::tanh) return ctg::tanh(a); else return ctg::relu(a);
    }
    /// The input projection x W_x + b of a whole sequence (T, B, X) -> (T, B, H), outside the loop.
    /// An input of another width than X is one compile error (and poison).
    template <expr Xs>
    static constexpr auto project(Xs xs) {
        if constexpr (Xs::is_poison) return poison{};
        else if constexpr (!detail::cell_input_fits<W_x::name, X, H, detail::last_dim<Xs>>()) return poison{};
        else return affine(xs, W_x{}, b{});
    }
    /// One step on a projected input p (B, H): phi(h W_h + p).
    static constexpr auto step(auto h, auto p) { return phi(h * W_h{} + p); }
};

/// GRU (PyTorch): r = s(p_r + h W_hr + b_hr), z = s(p_z + h W_hz + b_hz),
/// n = tanh(p_n + r * (h W_hn + b_hn)), h' = (1 - z) * n + z * h, with p = x W_i + b_i.
template <fixed_string P, int X, int H>
struct gru : recurrent<gru<P, X, H>, H>, gate_weights<P, X, H, 3> {
    /// One step on a projected input p (B, 3H): the next state (B, H), in one fused node.
    static constexpr auto step(auto h, auto p) { return gru_gates(p, gru::recurrent_part(h), h); }
    /// The same step from primitives (16 nodes): what the fused gru_gates is tested against.
    static constexpr auto composed_step(auto h, auto p) {
        auto q = gru::recurrent_part(h);
        auto r = sigmoid(slice<0, H>(p) + slice<0, H>(q));
        auto z = sigmoid(slice<H, 2 * H>(p) + slice<H, 2 * H>(q));
        auto n = ctg::tanh(slice<2 * H, 3 * H>(p) + mul(r, slice<2 * H, 3 * H>(q)));
        return mul(one_minus(z), n) + mul(z, h);
    }
};

/// LSTM (PyTorch): gates = x W_i + b_i + h W_h + b_h split as i, f, g, o;
/// c' = s(f) * c + s(i) * tanh(g), h' = s(o) * tanh(c'). The carried state is [h, c] (B, 2H);
/// run() returns the h part (T, B, H), run_state() the whole state.
template <fixed_string P, int X, int H>
struct lstm : recurrent<lstm<P, X, H>, 2 * H>, gate_weights<P, X, H, 4> {
    /// One step on a projected input p (B, 4H): the next state [h, c] (B, 2H), in one fused node.
    static constexpr auto step(auto s, auto p) { return lstm_gates(p, lstm::recurrent_part(slice<0, H>(s)), s); }
    /// The same step from primitives: what the fused lstm_gates is tested against.
    static constexpr auto composed_step(auto s, auto p) {
        auto h = slice<0, H>(s);
        auto c = slice<H, 2 * H>(s);
        auto g = p + lstm::recurrent_part(h);
        auto c2 = mul(sigmoid(slice<H, 2 * H>(g)), c) + mul(sigmoid(slice<0, H>(g)), ctg::tanh(slice<2 * H, 3 * H>(g)));
        auto h2 = mul(sigmoid(slice<3 * H, 4 * H>(g)), ctg::tanh(c2));
        return concat(h2, c2);
    }
    /// The scan over xs (T, B, X): every step's h (T, B, H).
    template <class... Extra>
    static constexpr auto run(auto xs, Extra... extra) {
        return slice<0, H>(lstm::recurrent::run_state(xs, extra...));
    }
};

/// A bidirectional encoder from two cells of output size H each: (T, B, X) -> (T, B, 2H), the
/// forward states then the backward states (the backward cell reads each sequence reversed within
/// its length).
template <class Fwd, class Bwd>
struct bidirectional {
    /// Both directions over xs (T, B, X): (T, B, 2H).
    static constexpr auto run(auto xs) { return concat(Fwd::run(xs), reverse_time(Bwd::run(reverse_time(xs)))); }
    /// Both directions over padded sequences of the given lengths (an index_input (B)): each backward
    /// pass starts at its sequence's last real step.
    static constexpr auto run(auto xs, auto lengths) {
        return concat(Fwd::run(xs, zero_state{}, lengths),
                      reverse_time(Bwd::run(reverse_time(xs, lengths), zero_state{}, lengths), lengths));
    }
};

namespace detail {
template <class L>
inline constexpr bool is_bidirectional = false;
template <class Fwd, class Bwd>
inline constexpr bool is_bidirectional<bidirectional<Fwd, Bwd>> = true;
}  // namespace detail

/// Recurrent layers run one over the other's outputs (T, B, X) -> (T, B, H of the last): PyTorch's
/// `num_layers` (nn.GRU(X, H, num_layers=2) is stacked_recurrent<gru<"g0", X, H>, gru<"g1", H, H>>;
/// bidirectional layers after the first read 2H). Each layer is a cell or an nn::bidirectional.
template <class First, class... Rest>
struct stacked_recurrent {
    /// Every layer in turn over xs (T, B, X): the last layer's outputs.
    static constexpr auto run(auto xs) {
        if constexpr (sizeof...(Rest) == 0) return First::run(xs);
        else return stacked_recurrent<Rest...>::run(First::run(xs));
    }
    /// The same over padded sequences of the given lengths (an index_input (B)), as PyTorch's over a
    /// PackedSequence: every layer stops each sequence at its length (a bidirectional one starts its
    /// backward pass there), so padding never reaches a real step; padded outputs are not PyTorch's zeros.
    static constexpr auto run(auto xs, auto lengths) {
        auto h = [&] {
            if constexpr (detail::is_bidirectional<First>) return First::run(xs, lengths);
            else return First::run(xs, zero_state{}, lengths);
        }();
        if constexpr (sizeof...(Rest) == 0) return h;
        else return stacked_recurrent<Rest...>::run(h, lengths);
    }
};

}  // namespace nn
}  // namespace ctg
