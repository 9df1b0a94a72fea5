// A type without static scores(q, k) given as the score function.
// EXPECT: ctg::attention: the score type must provide static scores\(q, k\)
#include <ctgraph/ctgraph.hpp>
using namespace ctg;
inline constexpr dim B = dyn('B');
struct not_a_score {
    static constexpr int similarity = 1;
};
int main() {
    auto o = attention(input<"q", B, 5, 8>{}, input<"k", B, 6, 8>{}, input<"v", B, 6, 4>{}, not_a_score{});
    (void)o;
}
