// examples/subword.hpp: SentencePiece BPE vocabularies for the examples on subword tokens
// (subword_gpt, finetune_gpt2): trained on a text with no normalisation and no dummy prefix, '\n' a
// piece of its own, so decode(encode(text)) is the text.
#pragma once
#include <cstdio>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <ctgraph/error.hpp>
#include <ctgraph/tensor.hpp>

namespace subword {

/// Throws ctg::error "what: status" unless SentencePiece's status is ok.
inline void check(const sentencepiece::util::Status& s, const std::string& what) {
    if (!s.ok()) throw ctg::error(what + ": " + s.ToString());
}

/// The lines of a text, one sentence each, for the SentencePiece trainer.
class line_iterator : public sentencepiece::SentenceIterator {
public:
    explicit line_iterator(const std::string& text) : text_(text) { next(); }
    bool done() const override { return pos_ > text_.size(); }
    void Next() override { next(); }
    const std::string& value() const override { return line_; }
    sentencepiece::util::Status status() const override { return {}; }

private:
    void next() {
        if (pos_ >= text_.size()) {
            pos_ = text_.size() + 1;
            return;
        }
        std::size_t end = text_.find('\n', pos_);
        if (end == std::string::npos) end = text_.size();
        line_ = text_.substr(pos_, end - pos_);
        pos_ = end + 1;
    }
    const std::string& text_;
    std::string line_;
    std::size_t pos_ = 0;
};

/// Loads `path`; when it is absent (or with `retrain`), first trains a BPE model of `pieces` pieces
/// on `text` into it. `who` names the program in errors.
inline void load_or_train(sentencepiece::SentencePieceProcessor& sp, const std::string& path, const std::string& text,
                          int pieces, bool retrain, const std::string& who) {
    if (retrain || !std::filesystem::exists(path)) {
        const std::string prefix = path.substr(0, path.size() - std::string(".model").size());
        line_iterator lines(text);
        check(sentencepiece::SentencePieceTrainer::Train(
                  std::unordered_map<std::string, std::string>{
                      {"model_prefix", prefix}, {"model_type", "bpe"}, {"vocab_size", std::to_string(pieces)},
                      {"character_coverage", "1.0"}, {"normalization_rule_name", "identity"},
                      {"remove_extra_whitespaces", "false"}, {"add_dummy_prefix", "false"},
                      {"user_defined_symbols", "\n"}, {"allow_whitespace_only_pieces", "true"},
                      {"max_sentence_length", "100000"}, {"minloglevel", "2"}},
                  &lines),
              who + ": training the SentencePiece model");
        std::printf("trained %s (BPE, %d pieces, on the training text)\n", path.c_str(), pieces);
    }
    check(sp.Load(path), who + ": loading " + path);
    if (sp.GetPieceSize() != pieces)
        throw ctg::error(who + ": " + path + " has " + std::to_string(sp.GetPieceSize()) + " pieces, the model " +
                         std::to_string(pieces) + " (delete it to train a new one)");
}

/// The ids of `text` and the number of characters each one stands for; throws unless they decode
/// to `text` (`what` names the text, `who` the program).
inline std::vector<ctg::index_t> encode(const sentencepiece::SentencePieceProcessor& sp, const std::string& text,
                                        std::vector<int>& chars_of, const std::string& what, const std::string& who) {
    const auto proto = sp.EncodeAsImmutableProto(text);  // owns what pieces() refers to
    const auto pieces = proto.pieces();
    std::vector<ctg::index_t> ids;
    std::vector<int> as_int;
    chars_of.clear();
    for (const auto& p : pieces) {
        ids.push_back(ctg::index_t(p.id()));
        as_int.push_back(int(p.id()));
        chars_of.push_back(int(p.end() - p.begin()));  // bytes of the input: one per character (ASCII)
    }
    std::string back;
    check(sp.Decode(as_int, &back), who + ": decoding");
    if (back != text) throw ctg::error(who + ": the " + what + " text does not decode to itself");
    return ids;
}

}  // namespace subword
