// examples/chars.hpp: the character vocabulary of the language-model examples (char_lm, char_gpt):
// '\n' is 0 and printable ASCII ' '..'~' are 1..95 (96 ids). Training text reads other bytes as ' '.
#pragma once
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <ctgraph/error.hpp>
#include <ctgraph/tensor.hpp>

namespace chars {

inline constexpr int vocab = 96;
inline bool in_vocab(unsigned char c) { return c == '\n' || (c >= 32 && c < 127); }
inline ctg::index_t encode(unsigned char c) { return c == '\n' ? 0 : in_vocab(c) ? ctg::index_t(c - 31) : 1; }
inline char decode(int id) { return id == 0 ? '\n' : char(id + 31); }

/// The ids of a text file; `who` names the program in errors; at least min_bytes long.
inline std::vector<ctg::index_t> read_text(const std::string& path, std::size_t min_bytes, const std::string& who) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ctg::io_error(who + ": cannot open '" + path + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string s = ss.str();
    if (s.size() < min_bytes)
        throw ctg::io_error(who + ": '" + path + "' is too short to train on (" + std::to_string(s.size()) + " bytes)");
    std::vector<ctg::index_t> ids(s.size());
    std::transform(s.begin(), s.end(), ids.begin(), [](char c) { return encode(static_cast<unsigned char>(c)); });
    return ids;
}

}  // namespace chars
