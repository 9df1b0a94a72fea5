// ctgraph/ops/embedding.hpp: embedding lookup (gather).
//   embedding(table (V, E), ids (...)) -> (..., E), row i = table[ids[i]]
// VJP: scatter-add, g_table[ids[i]] += gy[i]. ids must be an index_input; every id is checked
// against [0, V) in forward, and one outside throws ctg::index_error naming the input and position.
#pragma once
#include <string>
#include <type_traits>
#include <string_view>

#include "ctgraph/graph/node.hpp"
#include "ctgraph/kernels/quant_product.hpp"
#include "ctgraph/kernels/simd.hpp"
#include "ctgraph/op.hpp"

namespace ctg {
namespace ops {
struct embedding_op {
    static constexpr std::string_view name = "embedding";
    // ONNX: Gather of the table's rows (the ids are int64 in the exported graph).
    template <class B>
    static void onnx(B& b) { b.emit_y("Gather", {b.x(0), b.x(1)}, {{"axis", 0}}); }
    template <class Table, class Ids>
    static consteval bool rows_independent() { return true; }  // id r gives row r (see op.hpp)
    template <class Table, class Ids>
    static consteval bool check() { return Table::rank == 2 && Ids::rank + 1 <= max_rank; }
    template <class Table, class Ids>
    static consteval auto dims() {
        std::array<dim, Ids::rank + 1> r{};
        for (std::size_t i = 0; i < Ids::rank; ++i) r[i] = Ids::dims[i];
        r[Ids::rank] = Table::dims[1];
        return r;
    }
    template <class T>
    static void forward(op_io<T, 2>& c) {
        const std::size_t V = c.x[0].shape.d[0], E = c.x[0].shape.d[1], n = c.x[1].size();
        const index_t* ids = c.x[1].template as<index_t>();
        const T* table = c.x_data(0);
        T* y = c.y_data();
        for (std::size_t i = 0; i < n; ++i)
            if (ids[i] < 0 || std::size_t(ids[i]) >= V)
                throw index_error("ctg::embedding: id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                  " of input '" + std::string(c.x_name[1]) + "' is outside the table's range [0, " +
                                  std::to_string(V) + ")");
        // A table that a tied head reads from its quantised copy (options::weights) is looked up
        // there too: the model is its codes (a file holds nothing else), row v = the head's column v.
        if (kernels::quantized_rows(c.run.weights, table, V, E, ids, n, y)) return;
        for (std::size_t i = 0; i < n; ++i)
            std::copy(table + std::size_t(ids[i]) * E, table + (std::size_t(ids[i]) + 1) * E, y + i * E);
    }
    template <class T>
    static void backward(op_io<T, 2>& c) {
        T* g = c.gx_data(0);
        if (!g) return;
        const std::size_t E = c.x[0].shape.d[1], n = c.x[1].size();
        const index_t* ids = c.x[1].template as<index_t>();
        for (std::size_t i = 0; i < n; ++i) kernels::add_to(E, c.gy_data() + i * E, g + std::size_t(ids[i]) * E);
    }
};
}  // namespace ops

/// Rows of `table` (V, E) picked by the integer tensor `ids`.
template <expr Table, expr Ids>
constexpr auto embedding(Table t, Ids i) {
    static_assert(with_shapes<any_poison<Table, Ids> || (Ids::is_index && !Table::is_index),
                              typename Table::shape::pretty, typename Ids::shape::pretty>::value,
                  "ctg::embedding: the table must be floating-point and the ids an index_input");
    static_assert(with_shapes<any_poison<Table, Ids> ||
                                  ops::embedding_op::check<typename Table::shape, typename Ids::shape>(),
                              typename Table::shape::pretty, typename Ids::shape::pretty>::value,
                  "ctg::embedding: the table must have rank 2 (vocabulary, features) and the ids rank 3 or less");
    return make_node<ops::embedding_op>(t, i);
}
}  // namespace ctg
