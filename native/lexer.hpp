// The lexer: one lazily built product DFA over a grammar's lexemes, with longest-match tags.
// The reference is constrain/engine/grammar/lexer.py; this reproduces it state for state.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "counted.hpp"
#include "escapes.hpp"

namespace constrain {

// A lexer state would exceed the state budget (the caller turns it into a GrammarError).
struct LexerLimit : std::runtime_error {
    std::vector<int> lexemes;  // the lexemes of the state that did not fit
    LexerLimit(const std::string& what, std::vector<int> ids)
        : std::runtime_error(what), lexemes(std::move(ids)) {}
};

// One lexeme's DFA over its own byte classes (state 0 dead); with `escapes`, its strings'
// escaped spellings are states built as they are read, after the table's.
struct LexemeDFA {
    int n_own = 0;                     // its own byte classes
    std::vector<int32_t> table;        // n_states x n_own: next state (empty with escapes)
    std::vector<uint8_t> accepting;    // per state of the table
    std::vector<int32_t> own_of_joint; // per joint class of the lexer: its own class
    int32_t start = 0;
    int priority = 0;
    std::vector<int> owners;           // the lexemes it is a keyword of (empty: no keyword)
    std::array<uint8_t, 256> blocked{};  // keywords: bytes that would continue a word
    std::shared_ptr<JsonEscapes> escapes;  // null: the table is the whole DFA
    std::shared_ptr<CountedStrings> counted;  // set: the DFA (no table)

    int32_t next(int32_t state, int own) {
        if (counted) return counted->next(state, own);
        if (escapes) return escapes->next(state, own);
        return table[size_t(state) * n_own + own];
    }
    bool accepts(int32_t state) const {
        if (counted) return counted->accepts(state);
        return size_t(state) < accepting.size() && accepting[size_t(state)];
    }
    size_t n_states() const {
        return counted ? counted->n_states() : escapes ? escapes->n_states() : accepting.size();
    }
    size_t heap_bytes() const {
        size_t out = vector_bytes(table) + vector_bytes(accepting) + vector_bytes(own_of_joint) +
                     vector_bytes(owners);
        if (escapes) out += kSharedBlockBytes + sizeof(JsonEscapes) + escapes->heap_bytes();
        if (counted) out += kSharedBlockBytes + sizeof(CountedStrings) + counted->heap_bytes();
        return out;
    }
};

using Pair = std::pair<int32_t, int32_t>;  // (lexeme id or -1, its DFA state)
using Combo = std::vector<Pair>;

struct ComboHash {
    size_t operator()(const Combo& c) const noexcept {
        uint64_t h = 1469598103934665603ull;
        for (const auto& [j, s] : c) {
            h = (h ^ uint64_t(uint32_t(j))) * 1099511628211ull;
            h = (h ^ uint64_t(uint32_t(s))) * 1099511628211ull;
        }
        return size_t(h);
    }
};

class Lexer {
public:
    Lexer(std::array<int32_t, 256> classes, int n_joint, std::vector<LexemeDFA> lexemes,
          size_t max_states);

    int32_t start_of(const std::vector<int>& lexemes);  // sorted ids of lexemes with bytes
    // the state after byte b (0: dead); computes the row of `state` on first use
    int32_t next(int32_t state, uint8_t b) {
        if (!done_[state]) compute(state);
        return rows_[size_t(state) * n_joint_ + classes_[b]];
    }
    const int32_t* row(int32_t state) {
        if (!done_[state]) compute(state);
        return rows_.data() + size_t(state) * n_joint_;
    }
    int32_t tag(int32_t state) const { return tag_[state]; }
    bool can_end(int32_t tag, uint8_t b) const { return can_end_[size_t(tag) * 256 + b]; }
    // Bytes of one end class are alike to `can_end` under every tag (the keywords' blocked
    // bytes tell them apart).
    int32_t end_class(uint8_t b) const { return end_classes_[b]; }

    size_t n_states() const { return combos_.size(); }
    size_t n_lexemes() const { return lexemes_.size(); }
    const LexemeDFA& lexeme(int j) const { return lexemes_[size_t(j)]; }
    LexemeDFA& lexeme(int j) { return lexemes_[size_t(j)]; }
    size_t n_tags() const { return tag_sets_.size(); }
    int n_joint() const { return n_joint_; }
    const std::array<int32_t, 256>& classes() const { return classes_; }
    const std::vector<int>& tag_set(int32_t tag) const { return tag_sets_[tag]; }
    Combo key(int32_t state) const;  // the (lexeme, DFA state) pairs alive
    // The heap it holds: its lexemes' DFAs (with the escapes and counted strings built so far)
    // and the product's states, rows and tags (O(lexemes): running counts, no walk of states).
    size_t heap_bytes() const;
    // The grammar's lock: held by every call from outside C++ into this lexer or the parser,
    // automaton and masks built on it (their state is filled lazily, from several threads).
    std::mutex& mutex() const { return mutex_; }

private:
    int32_t intern(const Combo& combo);
    void compute(int32_t state);
    int32_t tag_of(const Combo& combo);

    std::array<int32_t, 256> classes_;
    int n_joint_;
    std::vector<LexemeDFA> lexemes_;
    size_t max_states_;
    std::vector<Combo> combos_;
    std::unordered_map<Combo, int32_t, ComboHash> index_;
    std::vector<int32_t> rows_;  // n_states x n_joint
    std::vector<uint8_t> done_;
    std::vector<int32_t> tag_;
    std::vector<std::vector<int>> tag_sets_;
    std::map<std::vector<int>, int32_t> tag_index_;
    std::vector<uint8_t> can_end_;  // n_tags x 256
    std::array<int32_t, 256> end_classes_{};
    std::map<std::vector<int>, int32_t> starts_;
    size_t keys_bytes_ = 0;  // what the combos, the tag sets and the keys of their indexes hold
    mutable std::mutex mutex_;
};

}  // namespace constrain
