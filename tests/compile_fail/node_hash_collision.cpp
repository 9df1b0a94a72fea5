// Two different nodes that hashed to one identity would both define the friend that names the
// node's op and operands: a compile error, never a silent merge of two nodes. A collision of the
// 128-bit hash is not something a test can produce, so this one registers two traits for one key
// directly, as make_node would.
// EXPECT: redefinition of .*node_traits_of
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
using X = input<"x", 3>;
using key = detail::node_key<1, 2>;
static_assert(sizeof(detail::node_registrar<key, node_traits<ops::tanh_op, X>>) > 0);
static_assert(sizeof(detail::node_registrar<key, node_traits<ops::sigmoid_op, X>>) > 0);
int main() {}
