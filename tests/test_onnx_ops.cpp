// ONNX export of the structural, recurrent and loss ops (each op's `onnx` member): a program per
// op, over representative shapes (dynamic axes, several ranks, axes and template arguments),
// exported, run in ONNX Runtime (onnxruntime-node) and compared with ctgraph's outputs to 1e-5 of
// their scale (tests/onnx_check.hpp).
#include <catch2/catch.hpp>

#include "onnx_check.hpp"

using namespace ctg;
using namespace ctg::testing::onnx_test;

namespace {
inline constexpr dim N = dyn('N');
inline constexpr dim M = dyn('M');
}  // namespace

TEST_CASE("concat exports as Concat on the last axis", "[onnx]") {
    using X = input<"x", B, 3, 4>;
    using Y = input<"y", B, 3, 2>;
    using Z = input<"z", B, 3, 5>;
    using U = input<"u", B, 2>;
    using V = input<"v", B, 3>;
    auto prog = compile<float, infer>(concat(X{}, Y{}, Z{}), concat(U{}, V{}), concat(V{}));
    check_export(prog,
                 {{"x", rshape{3, {2, 3, 4}}, wave(24, 1.0, 1)},
                  {"y", rshape{3, {2, 3, 2}}, wave(12, 2.0, 2)},
                  {"z", rshape{3, {2, 3, 5}}, wave(30, 1.5, 3)},
                  {"u", rshape{2, {2, 2}}, wave(4, 1.0, 4)},
                  {"v", rshape{2, {2, 3}}, wave(6, 1.0, 5)}},
                 "onnx_concat");
}

TEST_CASE("dropout and stop_gradient export as Identity", "[onnx]") {
    using X = input<"x", B, 6>;
    auto h = dropout<0.3>(tanh(X{}));
    auto prog = compile<float, infer>(h, relu(dropout<0.5>(h)) + stop_gradient(X{}), stop_gradient(h));
    check_export(prog, {{"x", rshape{2, {5, 6}}, wave(30, 2.0)}}, "onnx_dropout");
}

TEST_CASE("full exports as Expand, its dynamic extents read from the inputs", "[onnx]") {
    using X = input<"x", B, 4>;
    using Xs = input<"xs", 2, T, 3>;
    auto prog = compile<float, infer>(X{} + full<0.5, B, 4>(),                      // dynamic batch
                                      matmul(X{}, full<0.25, 4, 4>()),             // static
                                      concat(Xs{}, zeros<2, T, 2>()),               // a letter of another input
                                      mul(X{}, full<-1.5>()),                       // a scalar
                                      concat(full<2.0, B, T, 1>(), full<-3.0, B, T, 2>()));  // two letters, two inputs
    check_export(prog, {{"x", rshape{2, {3, 4}}, wave(12, 1.0)}, {"xs", rshape{3, {2, 5, 3}}, wave(30, 1.0, 2)}}, "onnx_full");
    check_export(prog, {{"x", rshape{2, {1, 4}}, wave(4, 1.0, 3)}, {"xs", rshape{3, {2, 2, 3}}, wave(12, 1.0, 4)}}, "onnx_full_b1");
}

TEST_CASE("permute exports as Transpose with its permutation", "[onnx]") {
    using Xs = input<"xs", T, B, 6>;
    using Y = input<"y", B, 5>;
    auto prog = compile<float, infer>(permute<1, 0, 2>(Xs{}), permute<2, 0, 1>(Xs{}),
                                      permute<0, 2, 1, 3>(reshape<T, B, 2, 3>(Xs{})), permute<3, 1, 0, 2>(reshape<T, B, 2, 3>(Xs{})),
                                      permute<1, 0>(Y{}));
    check_export(prog, {{"xs", rshape{3, {4, 3, 6}}, wave(72, 1.0)}, {"y", rshape{2, {3, 5}}, wave(15, 1.0, 2)}}, "onnx_permute");
}

TEST_CASE("transpose exports as Transpose of the last two axes", "[onnx]") {
    using Y = input<"y", B, 5>;
    using X = input<"x", B, 4, 3>;
    using W = input<"w", B, 2, T, 3>;
    auto prog = compile<float, infer>(transpose(Y{}), transpose(X{}), transpose(W{}), matmul(X{}, transpose(X{})));
    check_export(prog,
                 {{"y", rshape{2, {3, 5}}, wave(15, 1.0)},
                  {"x", rshape{3, {3, 4, 3}}, wave(36, 1.0, 2)},
                  {"w", rshape{4, {3, 2, 5, 3}}, wave(90, 1.0, 3)}},
                 "onnx_transpose");
}

TEST_CASE("reshape, unsqueeze and squeeze export as Reshape", "[onnx]") {
    using X = input<"x", B, T, 12>;
    using S = input<"s", 6, 4>;
    auto prog = compile<float, infer>(reshape<B, T, 3, 4>(X{}),  // split the features
                                      reshape<T, B, 12>(X{}),    // the letters swapped: the same elements, row-major
                                      reshape<12, B, T>(X{}),
                                      unsqueeze<1>(X{}), unsqueeze<-1>(X{}),
                                      squeeze<2>(reshape<B, T, 1, 12>(X{})),
                                      reshape<3, 8>(S{}), reshape<24>(S{}),
                                      sum<1, true>(X{}), mean<-1, true>(X{}));
    check_export(prog, {{"x", rshape{3, {2, 5, 12}}, wave(120, 1.0)}, {"s", rshape{2, {6, 4}}, wave(24, 1.0, 2)}}, "onnx_reshape");
    check_export(prog, {{"x", rshape{3, {1, 3, 12}}, wave(36, 1.0, 3)}, {"s", rshape{2, {6, 4}}, wave(24, 1.0, 4)}}, "onnx_reshape_b1");
}

TEST_CASE("sum and mean export as ReduceSum (times 1/n for the mean)", "[onnx]") {
    using X = input<"x", B, 3, 4>;
    using S = input<"s", 3, 5>;
    using Vb = input<"v", B>;
    auto prog = compile<float, infer>(sum<1>(X{}), sum<-1>(X{}), sum<0>(X{}),  // axes: static, last, dynamic
                                      mean<0>(X{}), mean<1>(X{}), mean<-1>(X{}),
                                      sum(X{}), mean(X{}),                     // everything, dynamic count
                                      mean(S{}), sum(S{}), mean<-2>(S{}),      // static
                                      sum<0>(Vb{}), mean<0>(Vb{}));            // to a scalar, dynamic count
    check_export(prog,
                 {{"x", rshape{3, {5, 3, 4}}, wave(60, 2.0)}, {"s", rshape{2, {3, 5}}, wave(15, 1.0, 2)}, {"v", rshape{1, {5}}, wave(5, 1.0, 3)}},
                 "onnx_reduce");
    check_export(prog,
                 {{"x", rshape{3, {1, 3, 4}}, wave(12, 1.0, 4)}, {"s", rshape{2, {3, 5}}, wave(15, 1.0, 5)}, {"v", rshape{1, {1}}, wave(1, 1.0, 6)}},
                 "onnx_reduce_b2");
}

TEST_CASE("slice exports as Slice of the last axis", "[onnx]") {
    using X = input<"x", B, 10>;
    using Y = input<"y", B, T, 6>;
    auto prog = compile<float, infer>(slice<2, 5>(X{}), slice<0, 10>(X{}), slice<9, 10>(X{}), slice<0, 3>(Y{}), slice<3, 6>(Y{}));
    check_export(prog, {{"x", rshape{2, {3, 10}}, wave(30, 1.0)}, {"y", rshape{3, {3, 4, 6}}, wave(72, 1.0, 2)}}, "onnx_slice");
}

TEST_CASE("at_time exports as Gather of one step", "[onnx]") {
    using Xs = input<"xs", T, B, 4>;
    using Ys = input<"ys", T, 3>;
    using Zs = input<"zs", 5, B, 2, 3>;
    auto prog = compile<float, infer>(at_time<0>(Xs{}), at_time<-1>(Xs{}), at_time<2>(Xs{}), at_time<-3>(Xs{}), at_time<1>(Ys{}),
                                      at_time<-1>(Zs{}), at_time<4>(Zs{}));
    check_export(prog,
                 {{"xs", rshape{3, {4, 2, 4}}, wave(32, 1.0)},
                  {"ys", rshape{2, {4, 3}}, wave(12, 1.0, 2)},
                  {"zs", rshape{4, {5, 2, 2, 3}}, wave(60, 1.0, 3)}},
                 "onnx_at_time");
}

TEST_CASE("reverse_time exports as Slice backwards, or ReverseSequence with lengths", "[onnx]") {
    using Xs = input<"xs", T, B, 3>;
    using X2 = input<"x2", T, B>;
    using Len = index_input<"lengths", B>;
    auto prog = compile<float, infer>(reverse_time(Xs{}), reverse_time(Xs{}, Len{}), reverse_time(X2{}), reverse_time(X2{}, Len{}),
                                      reverse_time(reverse_time(Xs{}, Len{}), Len{}));
    // Lengths from 0 (all padding) to the whole sequence.
    check_export(prog,
                 {{"xs", rshape{3, {5, 4, 3}}, wave(60, 1.0)},
                  {"x2", rshape{2, {5, 4}}, wave(20, 1.0, 2)},
                  {"lengths", rshape{1, {4}}, {5, 0, 3, 1}, true}},
                 "onnx_reverse_time");
    check_export(prog,
                 {{"xs", rshape{3, {2, 1, 3}}, wave(6, 1.0, 3)}, {"x2", rshape{2, {2, 1}}, wave(2, 1.0, 4)}, {"lengths", rshape{1, {1}}, {2}, true}},
                 "onnx_reverse_time_b1");
}

TEST_CASE("additive_scores exports as the composed w . tanh(qp_i + kp_j)", "[onnx]") {
    using Q = input<"qp", B, N, 6>;
    using K = input<"kp", B, M, 6>;
    using Qh = input<"qh", B, 2, 3, 5>;
    using Kh = input<"kh", B, 2, 4, 5>;
    using Q2 = input<"q2", 3, 5>;
    using K2 = input<"k2", M, 5>;
    auto prog = compile<float, infer>(additive_scores(Q{}, K{}, param<"w", 6>{}),  // (B, n, m)
                                      additive_scores(Qh{}, Kh{}, param<"wh", 5>{}),  // heads as an axis
                                      additive_scores(Q2{}, K2{}, param<"wh", 5>{}),  // no batch
                                      softmax(additive_scores(Q{}, K{}, param<"w", 6>{})));
    prog.params().init(5);
    check_export(prog,
                 {{"qp", rshape{3, {2, 3, 6}}, wave(36, 1.0)},
                  {"kp", rshape{3, {2, 7, 6}}, wave(84, 1.0, 2)},
                  {"qh", rshape{4, {2, 2, 3, 5}}, wave(60, 1.0, 3)},
                  {"kh", rshape{4, {2, 2, 4, 5}}, wave(80, 1.0, 4)},
                  {"q2", rshape{2, {3, 5}}, wave(15, 1.0, 5)},
                  {"k2", rshape{2, {7, 5}}, wave(35, 1.0, 6)}},
                 "onnx_additive_scores");
}

TEST_CASE("gru_gates exports as the gate math node by node", "[onnx]") {
    constexpr long long H = 4;
    using P = input<"p", B, 3 * H>;
    using Q = input<"q", B, 3 * H>;
    using Hs = input<"h", B, H>;
    using X = input<"x", T, B, 5>;
    using H0 = input<"h0", T, B, H>;
    // A step from its inputs, and one from projections (as nn::gru computes p and q), rank 3.
    auto p3 = affine(X{}, param<"W_i", 5, 3 * H>{}, param<"b_i", 3 * H>{});
    auto q3 = affine(H0{}, param<"W_h", H, 3 * H>{}, param<"b_h", 3 * H>{});
    auto prog = compile<float, infer>(gru_gates(P{}, Q{}, Hs{}), gru_gates(p3, q3, H0{}));
    prog.params().init(2);
    check_export(prog,
                 {{"p", rshape{2, {3, 12}}, wave(36, 2.0)},
                  {"q", rshape{2, {3, 12}}, wave(36, 2.0, 2)},
                  {"h", rshape{2, {3, 4}}, wave(12, 1.0, 3)},
                  {"x", rshape{3, {2, 3, 5}}, wave(30, 1.0, 4)},
                  {"h0", rshape{3, {2, 3, 4}}, wave(24, 1.0, 5)}},
                 "onnx_gru_gates");
}

TEST_CASE("lstm_gates exports as the gate math node by node", "[onnx]") {
    constexpr long long H = 3;
    using P = input<"p", B, 4 * H>;
    using Q = input<"q", B, 4 * H>;
    using S = input<"s", B, 2 * H>;
    using P3 = input<"p3", T, B, 4 * H>;
    using Q3 = input<"q3", T, B, 4 * H>;
    using S3 = input<"s3", T, B, 2 * H>;
    auto prog = compile<float, infer>(lstm_gates(P{}, Q{}, S{}), lstm_gates(P3{}, Q3{}, S3{}));
    check_export(prog,
                 {{"p", rshape{2, {3, 12}}, wave(36, 2.0)},
                  {"q", rshape{2, {3, 12}}, wave(36, 2.0, 2)},
                  {"s", rshape{2, {3, 6}}, wave(18, 1.5, 3)},
                  {"p3", rshape{3, {2, 3, 12}}, wave(72, 2.0, 4)},
                  {"q3", rshape{3, {2, 3, 12}}, wave(72, 2.0, 5)},
                  {"s3", rshape{3, {2, 3, 6}}, wave(36, 1.5, 6)}},
                 "onnx_lstm_gates");
}

TEST_CASE("mse_loss exports as the mean of squared differences", "[onnx]") {
    using P = input<"p", B, 5>;
    using Tg = input<"t", B, 5>;
    using Ps = input<"ps", 3, 4>;
    using Ts = input<"ts", 3, 4>;
    using P3 = input<"p3", B, T, 2>;
    using T3 = input<"t3", B, T, 2>;
    auto prog = compile<float, infer>(mse_loss(P{}, Tg{}), mse_loss(Ps{}, Ts{}), mse_loss(P3{}, T3{}), mse_loss(tanh(P{}), Tg{}));
    check_export(prog,
                 {{"p", rshape{2, {4, 5}}, wave(20, 2.0)},
                  {"t", rshape{2, {4, 5}}, wave(20, 1.0, 2)},
                  {"ps", rshape{2, {3, 4}}, wave(12, 1.0, 3)},
                  {"ts", rshape{2, {3, 4}}, wave(12, 1.0, 4)},
                  {"p3", rshape{3, {4, 3, 2}}, wave(24, 1.0, 5)},
                  {"t3", rshape{3, {4, 3, 2}}, wave(24, 1.0, 6)}},
                 "onnx_mse_loss");
}

TEST_CASE("softmax_cross_entropy exports decomposed, ignored rows left out of the mean", "[onnx]") {
    using Z = input<"z", B, T, 7>;
    using Tg = index_input<"t", B, T>;
    using Z2 = input<"z2", N, 5>;
    using T2 = index_input<"t2", N>;
    auto prog = compile<float, infer>(softmax_cross_entropy(Z{}, Tg{}),        // ignore index -100 (PyTorch's)
                                      softmax_cross_entropy<3>(Z2{}, T2{}),     // a class as the ignore index
                                      softmax_cross_entropy<-1>(Z2{}, T2{}));   // nothing ignored here
    std::vector<double> t = ids(12, 7);
    t[1] = t[6] = t[7] = -100;
    check_export(prog,
                 {{"z", rshape{3, {2, 6, 7}}, wave(84, 3.0)},
                  {"t", rshape{2, {2, 6}}, t, true},
                  {"z2", rshape{2, {6, 5}}, wave(30, 2.0, 2)},
                  {"t2", rshape{1, {6}}, {3, 0, 4, 3, 1, 2}, true}},
                 "onnx_softmax_cross_entropy");
    // Every row ignored: L = 0 (not the 0/0 of a mean over no rows).
    check_export(prog,
                 {{"z", rshape{3, {1, 2, 7}}, wave(14, 3.0, 3)},
                  {"t", rshape{2, {1, 2}}, {-100, -100}, true},
                  {"z2", rshape{2, {2, 5}}, wave(10, 2.0, 4)},
                  {"t2", rshape{1, {2}}, {3, 3}, true}},
                 "onnx_softmax_cross_entropy_ignored");
}
