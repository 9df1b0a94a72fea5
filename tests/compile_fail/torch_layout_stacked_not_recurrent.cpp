// nn::stacked_recurrent of a layer that is not a recurrent cell, given to load_torch: one error, at
// the layout, naming what a layer may be, and none from the entries that layer cannot number.
// EXPECT: ctg::nn::torch_layout: each layer of nn::stacked_recurrent is nn::gru, nn::lstm, nn::elman or nn::bidirectional of them
#include <ctgraph/ctgraph.hpp>
#include <ctgraph/nn/torch_layout.hpp>
using namespace ctg;
using net = nn::stacked_recurrent<nn::gru<"g0", 5, 6>, nn::linear<"lin.", 6, 6>>;
int main() {
    parameter_store<float> store;
    nn::load_torch<net>(store, "net.safetensors");
}
