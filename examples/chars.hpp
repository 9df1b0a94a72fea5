// examples/chars.hpp: the character vocabulary of the language-model examples (char_lm, char_gpt;
// subword_gpt reads its text through read_string):
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

/// The text of a file with every byte outside the vocabulary read as ' ' (the text the models see);
/// `who` names the program in errors; at least min_bytes long.
inline std::string read_string(const std::string& path, std::size_t min_bytes, const std::string& who) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ctg::io_error(who + ": cannot open '" + path + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    if (s.size() < min_bytes)
        throw ctg::io_error(who + ": '" + path + "' is too short to train on (" + std::to_string(s.size()) + " bytes)");
    for (char& c : s)
        if (!in_vocab(static_cast<unsigned char>(c))) c = ' ';
    return s;
}

/// The ids of a text file; `who` names the program in errors; at least min_bytes long.
inline std::vector<ctg::index_t> read_text(const std::string& path, std::size_t min_bytes, const std::string& who) {
    const std::string s = read_string(path, min_bytes, who);
    std::vector<ctg::index_t> ids(s.size());
    std::transform(s.begin(), s.end(), ids.begin(), [](char c) { return encode(static_cast<unsigned char>(c)); });
    return ids;
}

}  // namespace chars
