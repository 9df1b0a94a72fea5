// ctgraph/names.hpp: matching parameter names against lists of entries (options::frozen,
// options::trainable, optim::param_group, parameter_store::init of some parameters): a name, a
// prefix cut at a '.', or a pattern with '*'. Constexpr, so that programs decide at compile time.
#pragma once
#include <cstddef>
#include <string_view>

namespace ctg::detail {

/// Whether parameter `name` matches an entry of options::frozen or options::trainable: a '*' in
/// the entry stands for any run of characters (dots too); an entry without one is the name
/// itself, or a prefix of it that ends at a '.' of the name ("h" and "h." match "h.attn.w", "he" does not).
constexpr bool name_matches(std::string_view pattern, std::string_view name) {
    if (pattern.find('*') == std::string_view::npos)
        return name == pattern || (name.size() > pattern.size() && name.starts_with(pattern) &&
                                   (pattern.back() == '.' || name[pattern.size()] == '.'));
    // '*' matching with one backtrack point (the last star seen), linear in practice.
    std::size_t p = 0, n = 0, star = std::string_view::npos, from = 0;
    while (n < name.size()) {
        if (p < pattern.size() && pattern[p] == '*') star = p++, from = n;
        else if (p < pattern.size() && pattern[p] == name[n]) ++p, ++n;
        else if (star != std::string_view::npos) p = star + 1, n = ++from;
        else return false;
    }
    while (p < pattern.size() && pattern[p] == '*') ++p;
    return p == pattern.size();
}
/// Calls f(entry) for each entry of a list separated by spaces or commas ("*.bias, ln_f. wte").
template <class F>
constexpr void for_each_entry(std::string_view list, F f) {
    std::size_t k = 0;
    while (k < list.size()) {
        while (k < list.size() && (list[k] == ' ' || list[k] == ',')) ++k;
        const std::size_t start = k;
        while (k < list.size() && list[k] != ' ' && list[k] != ',') ++k;
        if (k > start) f(list.substr(start, k - start));
    }
}
/// Whether some entry of the list matches `name`.
constexpr bool matched_by_entries(std::string_view list, std::string_view name) {
    bool found = false;
    for_each_entry(list, [&](std::string_view e) { found = found || name_matches(e, name); });
    return found;
}

}  // namespace ctg::detail
