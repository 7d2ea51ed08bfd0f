// A grammar's whole masks over one vocabulary in one call: the vocabulary slices the state
// admits whole, the trie walk of the other tokens, special tokens and EOS. The reference is
// TokenAutomaton.bitmask_for (constrain/engine/matcher.py) with constrain/engine/slices.py.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "admits.hpp"
#include "cfg.hpp"

namespace constrain {

// A vocabulary's slices (slices.py): per slice its language, whether that is infinite, its
// tokens packed, and the slices whose languages hold it; shared by every grammar.
struct Slices {
    std::vector<DFATable> languages;
    std::vector<int32_t> starts;
    std::vector<uint8_t> infinite;
    std::vector<std::vector<uint32_t>> bitmasks;  // n_words each
    std::vector<std::vector<int>> within;         // within[i]: slices whose language holds i's
    size_t n_words = 0;
    std::shared_ptr<const Trie> trie;  // every token's
    // Throws std::invalid_argument naming the first inconsistency; then indexes the slices'
    // tokens in the trie (see `filter`).
    void validate_and_index();
    // What a walk of `trie` reads when the slices of `combination` (bit i: slice i) are
    // admitted whole: every other token (no trie is built per combination).
    SliceFilter filter(uint32_t combination) const {
        return {token_bits_.data(), subtree_bits_.data(), combination};
    }
    bool empty(int slice) const { return !(subtree_bits_[0] >> slice & 1); }  // no tokens

private:
    std::vector<uint32_t> token_bits_, subtree_bits_;  // see SliceFilter
};

class MaskFiller {
public:
    // `specials`: (special lexeme, its token id); `max_pairs`: the lexer's admits cap.
    MaskFiller(std::shared_ptr<CFGCore> core, std::shared_ptr<const Slices> slices,
               std::vector<std::pair<int32_t, int64_t>> specials, std::vector<int64_t> eos,
               size_t max_pairs, size_t max_piece_entries, size_t max_piece_bytes);
    // Sets the allowed tokens' bits in `row` (n_words, zeroed by the caller); returns whether
    // any bit is set.
    bool fill(const NodeRef& node, int32_t s, uint32_t* row, Meter& meter);
    const PieceCache& pieces() const { return pieces_; }
    CFGCore& core() { return *core_; }
    size_t n_words() const { return slices_->n_words; }

private:
    // The combination of slices admitted, given `known` (-1 unknown, 0 refused, 1 admitted)
    // and `ask(i)` for the others (-1: not asked), asked larger languages first so that an
    // answer settles the languages inside or around it.
    uint32_t decide(std::vector<int8_t> known, const std::function<int8_t(int)>& ask) const;
    uint32_t admitted(const NodeRef& node, int32_t s, Meter& meter);
    uint32_t admitted(int32_t s);
    bool admits(int32_t s, int slice);
    // Whether a string of the slice read from lexer state `s` may end the lexeme in progress
    // (where the lexer alone refuses it, the automaton may admit it across the end).
    bool ends_inside(int32_t s, int slice);
    NodeRef after_lexeme(const NodeRef& node, int32_t s, Meter& meter);

    std::shared_ptr<CFGCore> core_;
    std::shared_ptr<const Slices> slices_;
    std::vector<std::pair<int32_t, int64_t>> specials_;
    std::vector<int64_t> eos_;
    size_t max_pairs_;
    std::vector<int> order_;  // slices asked in this order (larger languages first)
    std::unordered_map<int32_t, uint32_t> admitted_;  // per lexer state
    std::map<std::tuple<int32_t, int32_t, int>, bool> lexeme_admits_;  // (lexeme, at, slice)
    std::map<std::pair<uint64_t, int32_t>, uint32_t> across_;  // per (node serial, state)
    std::map<std::pair<int32_t, int>, bool> ends_inside_;        // per (state, slice)
    PieceCache pieces_;
};

// One row of a batch: a filler, the state, the row to fill (zeroed), and what came of it.
struct FillJob {
    MaskFiller* filler = nullptr;
    NodeRef node;
    int32_t s = 0;
    uint32_t* row = nullptr;
    bool any = false;  // as MaskFiller::fill returns
    std::exception_ptr error;  // what a failed job threw
};

// Fills every job's row on `threads` threads (the caller's among them), each grammar's jobs
// in turn under its lock: jobs of different grammars run side by side. Call without the GIL.
void fill_batch(std::vector<FillJob>& jobs, int threads);

}  // namespace constrain
