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
    // The text family: slices of plain text (UTF-8), decided together by length in characters
    // where a state keeps every text string up to some length live and no longer one (see
    // MaskFiller::text_length). The family's one infinite slice holds the others' strings.
    uint32_t text_slices = 0;
    static constexpr int kMaxTextLength = 30;  // longest length decided
    // Throws std::invalid_argument naming the first inconsistency; then indexes the slices'
    // tokens in the trie (see `filter`).
    void validate_and_index();
    // What a walk of `trie` reads when the slices of `combination` (bit i: slice i) are
    // admitted whole: every other token (no trie is built per combination).
    SliceFilter filter(uint32_t combination) const {
        return {slot_bits_.data(), subtree_bits_.data(), combination};
    }
    bool empty(int slice) const { return !(subtree_bits_[0] >> slice & 1); }  // no tokens
    // The text family's tokens of 1 to `length` characters (1..kMaxTextLength), packed.
    const uint32_t* text_up_to(int length) const {
        return text_up_to_.data() + size_t(length - 1) * n_words;
    }
    int text_language() const { return text_language_; }  // the infinite text slice, or -1
    // Per state of the text language: it is inside a character (a continuation byte may follow).
    bool inside_character(int32_t r) const { return inside_character_[size_t(r)]; }
    // Bytes of one class lead every state of the slice's language to the same state.
    int32_t language_class(int slice, uint8_t b) const {
        return language_classes_[size_t(slice) * 256 + b];
    }

private:
    std::vector<uint32_t> token_bits_;  // per token id: its slice bit (SliceFilter::kNoSlice)
    std::vector<uint32_t> slot_bits_, subtree_bits_;  // see SliceFilter
    std::vector<uint32_t> text_up_to_;                 // kMaxTextLength x n_words
    int text_language_ = -1;
    std::vector<uint8_t> inside_character_;
    std::vector<int32_t> language_classes_;  // n slices x 256
};

// What the slices come to at a state: those admitted whole and, when `text_length` >= 0, the
// text family decided by length (tokens of at most that many bytes admitted, longer refused).
struct SliceDecision {
    uint32_t admitted = 0;
    int text_length = -1;
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
    // The heap its memos and pieces hold (not the grammar's nor the vocabulary's; O(slices)).
    size_t heap_bytes() const;
    CFGCore& core() { return *core_; }
    size_t n_words() const { return slices_->n_words; }

private:
    // The combination of slices admitted, given `known` (-1 unknown, 0 refused, 1 admitted)
    // and `ask(i)` for the others (-1: not asked), asked larger languages first so that an
    // answer settles the languages inside or around it.
    uint32_t decide(std::vector<int8_t> known, const std::function<int8_t(int)>& ask) const;
    SliceDecision decided(const NodeRef& node, int32_t s, Meter& meter);
    SliceDecision decided(int32_t s);
    // The length n such that from `s` every text string of at most n characters keeps the
    // lexer live and none longer does, without a lexeme ending on the way; -1 when there is
    // none up to kMaxTextLength (searched one character at a time over the text language).
    int text_length(int32_t s);
    bool admits(int32_t s, int slice);
    // One byte per group of bytes that the slice's language, the lexer's classes and what
    // ends its lexemes all treat alike: a search over (slice state, lexer state) pairs reads
    // these alone and finds what it would find reading all 256.
    const std::vector<uint8_t>& representatives(int slice);
    // Whether a string of the slice read from lexer state `s` may end the lexeme in progress
    // (where the lexer alone refuses it, the automaton may admit it across the end).
    bool ends_inside(int32_t s, int slice);

    std::shared_ptr<CFGCore> core_;
    std::shared_ptr<const Slices> slices_;
    std::vector<std::pair<int32_t, int64_t>> specials_;
    std::vector<int64_t> eos_;
    size_t max_pairs_;
    std::vector<int> order_;  // slices asked in this order (larger languages first)
    std::unordered_map<int32_t, SliceDecision> decided_;  // per lexer state
    TextBelow text_below_;  // the text slices, taken whole below a first character
    std::map<std::tuple<int32_t, int32_t, int>, bool> lexeme_admits_;  // (lexeme, at, slice)
    std::map<std::pair<uint64_t, int32_t>, uint32_t> across_;  // per (node serial, state)
    std::map<std::pair<int32_t, int>, bool> ends_inside_;        // per (state, slice)
    std::vector<std::vector<uint8_t>> representatives_;           // per slice, once read
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
