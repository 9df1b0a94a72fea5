// Gradient-flow inspector: the norm of dL/dh_k for every step k of a recurrence, for Elman, GRU and
// LSTM cells on the same inputs (the seed article's vanishing-gradient analysis, measured).
//
//   gradient_flow [out.csv] [out.png]
//
// The loss reads only the last state, L = <h_T, g> for a fixed random g, so dL/dh_k is the gradient
// that reaches step k through the recurrence alone. It is the adjoint of the scan's output, which
// the engine leaves readable after backward() (program::adjoint_of; a slice of it would hold only
// the slice's own, direct part). For the LSTM, h is the first half of its [h, c] state. Fresh models (default initialisation, LSTM forget-gate bias 1, the usual choice).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <ctgraph/ctgraph.hpp>
#include <ctgraph/xtensor.hpp>
#include <ctgraph/train.hpp>
#include <xtensor/xview.hpp>

#include <ctgraph/plot.hpp>

using namespace ctg;

inline constexpr dim B = dyn('B'), T = dyn('T');
constexpr int X = 16, H = 64;
constexpr std::size_t steps = 64, batch = 16;
using Xs = input<"xs", T, B, X>;
using G = input<"g", B, H>;

// ||dL/dh_k|| averaged over the batch, k = 1..T, for one recurrent model whose states are `hs`.
template <class States>
std::vector<double> flow(States hs, const xt::xtensor<float, 3>& xs, const xt::xtensor<float, 2>& g,
                         const char* forget_bias) {
    auto h = slice<0, H>(hs);
    auto prog = compile<float>(sum(mul(at_time<-1>(h), G{})));
    prog.params().init(21);
    if (forget_bias)
        prog.params().init(forget_bias, [](std::mt19937_64&, std::size_t i) { return (i >= H && i < 2 * H) ? 1.0f : 0.f; });
    prog.template feed<"xs">(xs);
    prog.template feed<"g">(g);
    prog.forward();
    prog.backward();
    auto adj = prog.adjoint_of(hs);  // the scan's states: BPTT leaves the full dL/dh_k there
    const std::size_t width = adj.shape(2);
    std::vector<double> norms(steps, 0.0);
    for (std::size_t k = 0; k < steps; ++k)
        for (std::size_t b = 0; b < batch; ++b) {
            double s = 0;
            for (std::size_t j = 0; j < std::size_t(H) && j < width; ++j) s += double(adj(k, b, j)) * adj(k, b, j);
            norms[k] += std::sqrt(s) / double(batch);
        }
    return norms;
}

int main(int argc, char** argv) try {
    const std::string csv = argc > 1 ? argv[1] : "gradient_flow.csv";
    const std::string png = argc > 2 ? argv[2] : "gradient_flow.png";
    std::mt19937_64 rng(8);
    std::normal_distribution<double> n01;
    xt::xtensor<float, 3> xs = xt::xtensor<float, 3>::from_shape({steps, batch, std::size_t(X)});
    for (auto& v : xs) v = float(n01(rng));
    xt::xtensor<float, 2> g = xt::xtensor<float, 2>::from_shape({batch, std::size_t(H)});
    for (auto& v : g) v = float(n01(rng));

    const auto elman = flow(nn::elman<"elman", X, H>::run(Xs{}), xs, g, nullptr);
    const auto gru = flow(nn::gru<"gru", X, H>::run(Xs{}), xs, g, nullptr);
    const auto lstm = flow(nn::lstm<"lstm", X, H>::run_state(Xs{}), xs, g, "lstm_b_i");

    std::ofstream out(csv);
    if (!out) throw io_error("gradient_flow: cannot write '" + csv + "'");
    out << "k,elman,gru,lstm\n";
    for (std::size_t k = 0; k < steps; ++k) out << k + 1 << ',' << elman[k] << ',' << gru[k] << ',' << lstm[k] << '\n';
    out.close();

    plot::chart c;
    c.title = "||dL/dh_k||, loss on the last step only (T = 64)";
    c.x_label = "time step k";
    c.y_label = "||dL/dh_k||";
    c.log_y = true;
    std::vector<double> k(steps);
    for (std::size_t i = 0; i < steps; ++i) k[i] = double(i + 1);
    c.lines = {{"Elman (tanh)", k, elman, {214, 39, 40}}, {"GRU", k, gru, {31, 119, 180}}, {"LSTM", k, lstm, {44, 160, 44}}};
    plot::write_png(c, png);

    auto decay = [](const std::vector<double>& v) { return v.front() / v.back(); };
    std::printf("||dL/dh_k|| at k = 1, 16, 32, 48, 64:\n");
    for (auto [name, v] : {std::pair{"elman", &elman}, std::pair{"gru", &gru}, std::pair{"lstm", &lstm}})
        std::printf("  %-6s %.3e %.3e %.3e %.3e %.3e   (k=1 / k=64: %.3e)\n", name, (*v)[0], (*v)[15], (*v)[31],
                    (*v)[47], (*v)[63], decay(*v));
    std::printf("wrote %s and %s\n", csv.c_str(), png.c_str());
    // The seed's claim, checked: the Elman gradient decays faster than the LSTM's.
    return decay(elman) < decay(lstm) ? 0 : 1;
} catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
}
