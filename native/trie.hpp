// The vocabulary trie and the walks that compute masks: tokens whose bytes keep an automaton
// live, skipping the subtree of every rejected prefix. References: TokenTrie.tokens_read_by
// (constrain/engine/vocab.py) and CFGAutomaton._walk (constrain/engine/grammar/cfg.py).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "lexer.hpp"
#include "texts.hpp"

namespace constrain {

// A TokenTrie's arrays (nodes in DFS order, node 0 the root).
struct Trie {
    std::vector<uint8_t> byte;
    std::vector<int32_t> depth;
    std::vector<int64_t> subtree_end, token_start, tokens, child_start, children;

    size_t n_nodes() const { return byte.size(); }
    // Throws std::invalid_argument naming the first broken invariant the walks rely on: the
    // arrays' sizes, the nodes in DFS order (depths, subtrees), children and token ranges.
    void validate() const;
};

// A TokenTrie's arrays built from every id's bytes, as TokenTrie.build builds them (the
// reference): nodes in DFS order, ids of equal bytes in id order at their node. Ids at or past
// `texts.size()`, and empty texts, have no node (0).
struct TrieArrays {
    std::vector<uint8_t> byte;
    std::vector<int32_t> depth;
    std::vector<int64_t> parent, subtree_end, child_start, children, token_start, tokens,
        node_of_token;
};
TrieArrays build_trie(const TokenTexts& texts, int64_t n_ids);

// The tokens a walk reads: those outside the slices of `combination` (bit i: slice i), told
// by each token's slice bit and, per node, the bits of its subtree's tokens; a walk skips a
// subtree with none left. Null tables keep every token.
struct SliceFilter {
    // per entry of the trie's `tokens` (read in order as the walk goes): 1 << the token's
    // slice, or kNoSlice
    const uint32_t* slot_bits = nullptr;
    const uint32_t* subtree_bits = nullptr;  // per node: the OR of its subtree's token bits
    uint32_t combination = 0;
    static constexpr uint32_t kNoSlice = uint32_t(1) << 31;
    bool keeps_node(int64_t node) const {
        return !subtree_bits || (subtree_bits[node] & ~combination);
    }
};

// What a walk inside the lexemes in progress found: the tokens read wholly inside them, and
// per tag the trie nodes whose byte ended a lexeme of that tag (a new lexeme starts there).
// The tokens of nodes read one after another are runs of the trie's token slots, [begin, end)
// of `Trie::tokens` (kept as runs: a walk over most of a large vocabulary finds few); `tokens`
// holds the ones taken one by one.
struct Piece {
    std::vector<std::pair<int64_t, int64_t>> runs;
    std::vector<int32_t> tokens;
    std::map<int32_t, std::vector<int64_t>> ends;
    size_t n_tokens() const;  // in the runs and `tokens`
    template <typename Visit>
    void each_token(const Trie& trie, Visit&& visit) const {
        for (const auto& [begin, end] : runs)
            for (int64_t k = begin; k < end; ++k) visit(int32_t(trie.tokens[size_t(k)]));
        for (int32_t t : tokens) visit(t);
    }
};

// Plain-text slices a walk may take whole below a node: where the first character read leaves
// the lexer in a state that keeps every plain-text string live (`admitted_after(state)`), every
// token of `slices` below is taken without reading it (a pattern that only constrains the first
// character, such as "not /").
struct TextBelow {
    uint32_t slices = 0;
    std::function<bool(int32_t)> admitted_after;
};

// From lexer `state`, read the subtrees of `starts` (each start node's own byte first). A dead
// byte ends the lexeme when the state's tag may end before it; at a start node only when
// `end_at_start` (false when the state has just started a lexeme: nothing can end yet). Only
// the nodes `filter` keeps are read, and every token of a node read is found (those of the
// slices it skips too); with `text`, see TextBelow.
Piece walk_lexer(Lexer& lexer, const Trie& trie, int32_t state, const std::vector<int64_t>& starts,
                 bool end_at_start, const SliceFilter& filter = {},
                 const TextBelow* text = nullptr);

// A byte DFA's transitions over its byte classes (n x k, state 0 dead; `classes` maps each
// byte to its column), checked once when copied in: n x k cells, not n x 256 (a literal of a
// million bytes reads two classes).
struct DFATable {
    std::vector<int32_t> next;
    std::array<uint8_t, 256> classes{};
    int64_t n_states = 0;
    int32_t n_classes = 0;

    int32_t at(int32_t state, uint8_t byte) const {
        return next[size_t(state) * size_t(n_classes) + classes[byte]];
    }
};

// The tokens whose bytes lead a byte DFA from `state` to a live state.
std::vector<int32_t> walk_dfa(const Trie& trie, const DFATable& dfa, int32_t state);

}  // namespace constrain
