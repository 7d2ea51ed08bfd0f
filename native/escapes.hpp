// Every JSON escape spelling of a lexeme's strings, its states built as they are read.
// The reference is constrain/engine/regex/escapes.py (EscapedDFA); this builds the same
// subtrees: states 0 .. n_base - 1 are the base DFA's, subtree states follow, interned by what
// they lead to, their rows computed on first read.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "nbytes.hpp"

namespace constrain {

class JsonEscapes {
public:
    // `table`: the base DFA (n_base x n_own, over the escaped DFA's own classes, where every
    // byte an escape reads has a class of its own); `start` is inside a string if `in_string`.
    JsonEscapes(std::vector<int32_t> table, int n_own, int32_t n_base, int32_t start,
                bool in_string, std::array<int32_t, 256> own_of_byte);

    int32_t next(int32_t state, int own);   // 0: dead
    int32_t n_base() const { return n_base_; }
    size_t n_states() const { return size_t(n_base_) + nodes_.size(); }
    // The heap it holds: the base table and the subtrees built so far (O(1)).
    size_t heap_bytes() const;

private:
    struct Run {
        int64_t lo, hi;
        int32_t target;
        bool operator<(const Run& o) const {
            return lo != o.lo ? lo < o.lo : hi != o.hi ? hi < o.hi : target < o.target;
        }
        bool operator==(const Run& o) const {
            return lo == o.lo && hi == o.hi && target == o.target;
        }
    };
    using Runs = std::vector<Run>;
    enum Kind : int { kEscape, kHex, kLow, kU };
    struct Node {
        Kind kind;
        int level;
        Runs runs;
        bool built = false;
        std::vector<int32_t> row;  // n_own entries once built
    };

    int32_t base(int32_t s, int b) const {
        return table_[size_t(s) * size_t(n_own_) + size_t(own_of_byte_[size_t(b)])];
    }
    int32_t walk(int32_t s, const std::string& text) const;
    std::vector<Run> byte_runs(int32_t s, int lo, int hi) const;
    static Runs merged(Runs runs);
    static Runs clipped(const Runs& runs, int64_t lo, int64_t hi, int64_t shift);

    const Runs& continuations(int32_t s, int k);
    const Runs& characters(int32_t s);
    int32_t escape_of(int32_t s);
    bool inside_of(int32_t s) const;
    void reached(int32_t s, bool inside);

    int32_t node(Kind kind, int level, const Runs& runs);
    void build(int32_t id);
    std::vector<std::pair<int, int32_t>> edges(Kind kind, int level, const Runs& runs);
    int32_t hex_digits(const Runs& leaves, int level);
    int32_t low_surrogate(const Runs& runs);
    Runs code_units(const Runs& chars);

    std::vector<int32_t> table_;
    int n_own_;
    std::array<int32_t, 256> own_of_byte_;
    int32_t n_base_;
    int backslash_own_, quote_own_;
    std::vector<int8_t> inside_;  // per base state: 1 inside a string, 0 outside, -1 not reached
    std::vector<int32_t> escape_of_;  // per base state: its subtree, -1 until computed
    std::vector<Node> nodes_;
    std::map<std::vector<int64_t>, int32_t> index_;  // (kind, level, runs...) -> node
    std::unordered_map<int32_t, Runs> chars_;
    std::map<std::pair<int32_t, int>, Runs> cont_;
    size_t heap_ = 0;  // what the nodes' runs and rows, the index's keys and the runs hold
};

}  // namespace constrain
