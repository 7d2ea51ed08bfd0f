// Quoted strings of a DFA with low..high characters, their states built as they are read.
// The reference is constrain/engine/regex/counted.py (CountedDFA): a state is (strings state,
// state inside the current character, characters read), built only when some completion
// closes the string within the bound, which CompletionLengths (computed in Python on the
// canonical DFAs) answers for character boundaries.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "escapes.hpp"

namespace constrain {

// A byte DFA over its own classes, or its every-escape spelling (`escapes` over the table).
struct ByteWalk {
    std::vector<int32_t> table;  // n_base x n_own (moved into `escapes` when set)
    std::vector<uint8_t> accepting;  // per base state
    std::array<int32_t, 256> own_of_byte{};
    int n_own = 0;
    int32_t start = 0;
    std::shared_ptr<JsonEscapes> escapes;

    int32_t next(int32_t s, int b) {
        int own = own_of_byte[size_t(b)];
        return escapes ? escapes->next(s, own) : table[size_t(s) * size_t(n_own) + size_t(own)];
    }
    bool accepts(int32_t s) const {
        return s >= 0 && size_t(s) < accepting.size() && accepting[size_t(s)];
    }
    size_t heap_bytes() const {
        size_t out = vector_bytes(table) + vector_bytes(accepting);
        if (escapes) out += kSharedBlockBytes + sizeof(JsonEscapes) + escapes->heap_bytes();
        return out;
    }
};

// Per character boundary of the canonical strings: after how many more characters it can
// close (`lengths`, window x boundaries; periodic from `first` with `period`, or unknown past
// the window when `period` is 0).
struct CompletionLengths {
    std::vector<int32_t> index;  // per base state: its boundary, -1: not a boundary
    std::vector<uint8_t> lengths;
    int64_t window = 0, n_boundaries = 0, first = 0, period = 0;

    int64_t next_length(int32_t boundary, int64_t at_least);  // -1: none
    bool fits(int32_t state, int64_t read, int64_t low, int64_t high);  // high -1: unbounded
    size_t heap_bytes() const {
        return vector_bytes(index) + vector_bytes(lengths) + hash_bytes(of_) + of_bytes_;
    }

private:
    std::unordered_map<int32_t, std::vector<int64_t>> of_;  // per boundary: its lengths
    size_t of_bytes_ = 0;  // what the lengths in `of_` hold
};

class CountedStrings {
public:
    // `byte_of_class`: a byte of each class of the counted lexeme; `quote_class`: the quote's
    // class (alone in it); `high` -1: no maximum.
    CountedStrings(ByteWalk strings, ByteWalk chr, int64_t low, int64_t high,
                   CompletionLengths lengths, std::vector<uint8_t> byte_of_class,
                   int quote_class);

    int32_t next(int32_t state, int own);  // 0: dead
    bool accepts(int32_t state) const;
    size_t n_states() const { return keys_.size(); }
    int n_classes() const { return int(byte_of_class_.size()); }
    int32_t start() const { return start_; }
    bool bounded() const { return high_ >= 0; }  // has a maximum length
    // The heap it holds: its walks and tables, and the states built so far (O(1)).
    size_t heap_bytes() const;

private:
    struct Key {
        int32_t at, inner;
        int64_t read;
        bool operator<(const Key& o) const {
            return at != o.at ? at < o.at : inner != o.inner ? inner < o.inner : read < o.read;
        }
    };

    void compute(int32_t state);
    int32_t enter(int32_t at, int32_t inner, int64_t read);
    int32_t id(const Key& key);
    bool closes_somewhere(const Key& key);
    const std::vector<int32_t>& ends_of(int32_t at, int32_t inner);

    ByteWalk strings_, chr_;
    int64_t low_, high_;
    CompletionLengths lengths_;
    std::vector<uint8_t> byte_of_class_;
    int quote_class_;
    int32_t start_ = 0;
    std::vector<Key> keys_;  // per state (0: dead)
    std::map<Key, int32_t> ids_;
    std::vector<std::vector<int32_t>> rows_;  // per state: next per class, empty until computed
    std::map<std::pair<int32_t, int32_t>, std::vector<int32_t>> ends_;
    size_t rows_bytes_ = 0, ends_bytes_ = 0;  // what the rows and the ends' lists hold
};

}  // namespace constrain
