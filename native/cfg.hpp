// A context-free grammar's byte automaton in C++: the lexer driving the Earley parser, and the
// mask walk over the vocabulary trie. The reference is constrain/engine/grammar/cfg.py
// (CFGAutomaton.step, _start, _end, token_ids): the same states and the same masks.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "admits.hpp"
#include "earley.hpp"
#include "lexer.hpp"
#include "trie.hpp"

namespace constrain {

// Where a mask piece starts: a lexer state and trie nodes (the root's children, or nodes
// whose byte started a lexeme).
struct PieceKey {
    uint32_t combination = 0;  // the slices the walk skips (SliceFilter)
    int32_t state = 0;
    bool at_root = false;
    std::vector<int64_t> starts;  // empty at the root
    bool operator==(const PieceKey& o) const {
        return combination == o.combination && state == o.state && at_root == o.at_root &&
               starts == o.starts;
    }
};

struct PieceKeyHash {
    size_t operator()(const PieceKey& k) const noexcept {
        uint64_t h = (uint64_t(uint32_t(k.state)) * 0x9E3779B97F4A7C15ull + k.at_root) ^
                     (uint64_t(k.combination) << 40);
        for (int64_t n : k.starts) h = (h ^ uint64_t(n)) * 1099511628211ull;
        return size_t(h);
    }
};

// The mask pieces of one grammar over one trie (per slice combination); the least recently
// used are forgotten past `max_entries` or `max_bytes` of entries (the newest is always kept).
class PieceCache {
public:
    PieceCache(size_t max_entries, size_t max_bytes)
        : max_entries_(max_entries), max_bytes_(max_bytes) {}
    std::shared_ptr<const Piece> get(const PieceKey& key);
    void put(const PieceKey& key, std::shared_ptr<const Piece> piece);
    size_t size() const { return index_.size(); }
    // What the entries hold: pieces, keys (twice: in the order and the index), their nodes.
    size_t bytes() const { return bytes_; }
    size_t heap_bytes() const { return bytes_ + index_.bucket_count() * sizeof(void*); }
    size_t max_entries_, max_bytes_;

private:
    using Entry = std::pair<PieceKey, std::shared_ptr<const Piece>>;
    static size_t entry_bytes(const PieceKey& key, const Piece& piece);
    std::list<Entry> order_;  // most recently used first
    std::unordered_map<PieceKey, std::list<Entry>::iterator, PieceKeyHash> index_;
    size_t bytes_ = 0;
};

// What a piece holds in bytes (itself, made by make_shared, and its vectors and ends).
size_t piece_bytes(const Piece& piece);

class CFGCore {
public:
    CFGCore(std::shared_ptr<Lexer> lexer, DottedRules rules, std::vector<int32_t> ignore,
            std::vector<int32_t> specials, size_t max_items, Meter& meter);

    static constexpr int32_t kFresh = 0;  // lexer state: no lexeme in progress

    EarleyParser& parser() { return parser_; }
    // The heap its parser holds (the lexer, shared, reports its own: Lexer::heap_bytes).
    size_t heap_bytes() const {
        return parser_.heap_bytes() + vector_bytes(ignore_) + vector_bytes(specials_);
    }
    Lexer& lexer() { return *lexer_; }
    // The lexer state where the lexemes `node` allows (and the ignored ones) start.
    int32_t start_of(ChartNode& node);
    // The node after a lexeme of `tag` ends at `node` (ignored lexemes skipped); null if none.
    NodeRef end(const NodeRef& node, int32_t tag, Meter& meter);
    // The node reached if the lexeme in progress ends now (`node` if none started); null if
    // it cannot end there.
    NodeRef after_lexeme(const NodeRef& node, int32_t s, Meter& meter);
    // Reads `data` from (node, s) in place; false once no continuation is in the language.
    bool step(NodeRef& node, int32_t& s, const uint8_t* data, size_t n, Meter& meter);
    // Whether every string of `language` (and each prefix) read from (node, s) keeps it live
    // as `step` reads it, lexemes ending and the parser moving on inside the strings: a slice
    // the lexer state alone cannot admit because its strings run past a lexeme's end (inside
    // a long string counted in chunks). Past `max_pairs` pairs: false, "not shown". `bytes`
    // stands for all 256 as in constrain::admits.
    bool admits(const NodeRef& node, int32_t s, const DFATable& language, int32_t start,
                size_t max_pairs, Meter& meter, const std::vector<uint8_t>& bytes = every_byte());
    // The tokens of `trie` whose bytes keep (node, s) live, those `filter` keeps at least (a
    // piece may hold tokens of the slices it skips), given to `found` a piece at a time (a
    // token may come twice); `cache` holds the pieces of this trie, keyed by the filter's
    // combination; `text` as walk_lexer takes it.
    void walk(const NodeRef& node, int32_t s, const Trie& trie, const SliceFilter& filter,
              PieceCache& cache, Meter& meter,
              const std::function<void(const Piece&)>& found,
              const TextBelow* text = nullptr);

private:
    std::shared_ptr<Lexer> lexer_;
    EarleyParser parser_;
    std::vector<int32_t> ignore_, specials_;  // sorted lexeme ids
};

}  // namespace constrain
