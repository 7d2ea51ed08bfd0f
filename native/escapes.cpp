#include <algorithm>
#include <string>

#include "escapes.hpp"

namespace constrain {

namespace {

constexpr int kQuote = 0x22, kBackslash = 0x5C;
constexpr int32_t kUnknown = -1;
// (code point, its short escape letter) of the short escapes and `\/`
constexpr std::pair<int, char> kShort[] = {{0x08, 'b'}, {0x09, 't'}, {0x0A, 'n'}, {0x0C, 'f'},
                                           {0x0D, 'r'}, {0x22, '"'}, {0x5C, '\\'}, {0x2F, '/'}};

// The escape JSON requires for code point `cp` (< 0x20, `"` or `\`), after the backslash.
std::string required_escape(int cp) {
    for (const auto& [c, letter] : kShort)
        if (c == cp && c != 0x2F) return std::string(1, letter);
    static const char* hex = "0123456789abcdef";
    return std::string("u00") + hex[cp >> 4] + hex[cp & 15];
}

// The bytes of hex digit d: one digit, or a letter in either case.
std::vector<int> hex_bytes(int d) {
    if (d < 10) return {'0' + d};
    return {'a' + d - 10, 'A' + d - 10};
}

constexpr int kPayload[4] = {0, 0x1F, 0x0F, 0x07};

}  // namespace

JsonEscapes::JsonEscapes(std::vector<int32_t> table, int n_own, int32_t n_base, int32_t start,
                         bool in_string, std::array<int32_t, 256> own_of_byte)
    : table_(std::move(table)),
      n_own_(n_own),
      own_of_byte_(own_of_byte),
      n_base_(n_base),
      backslash_own_(own_of_byte[kBackslash]),
      quote_own_(own_of_byte[kQuote]),
      inside_(size_t(n_base), -1),
      escape_of_(size_t(n_base), kUnknown) {
    if (start > 0) inside_[size_t(start)] = in_string ? 1 : 0;
}

size_t JsonEscapes::heap_bytes() const {
    return vector_bytes(table_) + vector_bytes(inside_) + vector_bytes(escape_of_) +
           vector_bytes(nodes_) + tree_bytes(index_) + hash_bytes(chars_) + tree_bytes(cont_) +
           heap_;
}

bool JsonEscapes::inside_of(int32_t s) const {
    if (inside_[size_t(s)] < 0)
        throw std::logic_error("escapes: state " + std::to_string(s) + " read before reached");
    return inside_[size_t(s)] == 1;
}

void JsonEscapes::reached(int32_t s, bool inside) {
    int8_t& found = inside_[size_t(s)];
    if (found < 0)
        found = inside ? 1 : 0;
    else if (found != (inside ? 1 : 0))
        throw std::logic_error("escapes: state " + std::to_string(s) +
                               " is both inside and outside a string");
}

int32_t JsonEscapes::next(int32_t state, int own) {
    if (state < n_base_) {
        bool inside = inside_of(state);
        if (own == backslash_own_ && inside) return escape_of(state);
        int32_t t = table_[size_t(state) * size_t(n_own_) + size_t(own)];
        if (t) reached(t, inside != (own == quote_own_));
        return t;
    }
    auto id = state - n_base_;
    if (!nodes_[size_t(id)].built) build(id);
    return nodes_[size_t(id)].row[size_t(own)];
}

int32_t JsonEscapes::walk(int32_t s, const std::string& text) const {
    for (unsigned char b : text) {
        s = base(s, b);
        if (!s) return 0;
    }
    return s;
}

std::vector<JsonEscapes::Run> JsonEscapes::byte_runs(int32_t s, int lo, int hi) const {
    std::vector<Run> out;
    int start = lo;
    for (int b = lo + 1; b <= hi + 1; ++b) {
        if (b > hi || base(s, b) != base(s, start)) {
            if (int32_t t = base(s, start)) out.push_back({start, b - 1, t});
            start = b;
        }
    }
    return out;
}

JsonEscapes::Runs JsonEscapes::merged(Runs runs) {
    std::sort(runs.begin(), runs.end());
    runs.erase(std::unique(runs.begin(), runs.end()), runs.end());
    Runs out;
    for (const Run& r : runs) {
        if (!out.empty() && out.back().target == r.target && out.back().hi + 1 == r.lo)
            out.back().hi = r.hi;
        else
            out.push_back(r);
    }
    return out;
}

JsonEscapes::Runs JsonEscapes::clipped(const Runs& runs, int64_t lo, int64_t hi, int64_t shift) {
    Runs out;
    for (const Run& r : runs) {
        if (r.hi < lo) continue;
        if (r.lo > hi) break;
        out.push_back({std::max(r.lo, lo) - shift, std::min(r.hi, hi) - shift, r.target});
    }
    return out;
}

const JsonEscapes::Runs& JsonEscapes::continuations(int32_t s, int k) {
    auto key = std::make_pair(s, k);
    auto found = cont_.find(key);
    if (found != cont_.end()) return found->second;
    Runs runs;
    for (const Run& r : byte_runs(s, 0x80, 0xBF)) {
        if (k == 1) {
            runs.push_back({r.lo - 0x80, r.hi - 0x80, r.target});
            continue;
        }
        const Runs tails = continuations(r.target, k - 1);  // a copy: the map may rehash
        for (int64_t c = r.lo - 0x80; c <= r.hi - 0x80; ++c) {
            int64_t b0 = c << (6 * (k - 1));
            for (const Run& t : tails) runs.push_back({b0 + t.lo, b0 + t.hi, t.target});
        }
    }
    Runs& out = cont_[key] = merged(std::move(runs));
    heap_ += vector_bytes(out);
    return out;
}

const JsonEscapes::Runs& JsonEscapes::characters(int32_t s) {
    auto found = chars_.find(s);
    if (found != chars_.end()) return found->second;
    Runs runs;
    for (const Run& r : byte_runs(s, 0x20, 0x7F)) {  // minus the quote and the backslash
        int64_t lo = r.lo;
        for (int x : {kQuote, kBackslash}) {
            if (lo <= x && x <= r.hi) {
                if (lo < x) runs.push_back({lo, x - 1, r.target});
                lo = x + 1;
            }
        }
        if (lo <= r.hi) runs.push_back({lo, r.hi, r.target});
    }
    const int leads[3][3] = {{0xC2, 0xDF, 1}, {0xE0, 0xEF, 2}, {0xF0, 0xF4, 3}};
    for (const auto& lead : leads) {
        int k = lead[2];
        int64_t span = int64_t(1) << (6 * k);
        for (const Run& r : byte_runs(s, lead[0], lead[1])) {
            const Runs tails = continuations(r.target, k);
            if (tails.size() == 1 && tails[0].lo == 0 && tails[0].hi == span - 1) {
                runs.push_back({(r.lo & kPayload[k]) << (6 * k),
                                ((r.hi & kPayload[k]) << (6 * k)) + span - 1, tails[0].target});
                continue;
            }
            for (int64_t b = r.lo; b <= r.hi; ++b) {
                int64_t b0 = (b & kPayload[k]) << (6 * k);
                for (const Run& t : tails) runs.push_back({b0 + t.lo, b0 + t.hi, t.target});
            }
        }
    }
    if (int32_t after = base(s, kBackslash)) {  // the escapes the base requires
        for (int cp = 0; cp < 0x60; ++cp) {
            if (cp >= 0x20 && cp != kQuote && cp != kBackslash) continue;
            if (int32_t t = walk(after, required_escape(cp))) runs.push_back({cp, cp, t});
        }
    }
    Runs& out = chars_[s] = merged(std::move(runs));
    heap_ += vector_bytes(out);
    return out;
}

int32_t JsonEscapes::escape_of(int32_t s) {
    if (escape_of_[size_t(s)] == kUnknown) {
        const Runs chars = characters(s);
        escape_of_[size_t(s)] = chars.empty() ? 0 : node(kEscape, 0, chars);
    }
    return escape_of_[size_t(s)];
}

int32_t JsonEscapes::node(Kind kind, int level, const Runs& runs) {
    std::vector<int64_t> key{kind, level};
    for (const Run& r : runs) {
        key.push_back(r.lo);
        key.push_back(r.hi);
        key.push_back(r.target);
    }
    auto found = index_.find(key);
    if (found != index_.end()) return found->second;
    auto id = int32_t(n_base_ + int32_t(nodes_.size()));
    nodes_.push_back(Node{kind, level, runs, false, {}});
    heap_ += copy_bytes(runs) + vector_bytes(key);
    index_.emplace(std::move(key), id);
    return id;
}

void JsonEscapes::build(int32_t id) {
    Kind kind = nodes_[size_t(id)].kind;
    int level = nodes_[size_t(id)].level;
    const Runs runs = nodes_[size_t(id)].runs;  // a copy: building may add nodes
    std::vector<int32_t> row(size_t(n_own_), 0);
    for (const auto& [b, t] : edges(kind, level, runs)) {
        row[size_t(own_of_byte_[size_t(b)])] = t;
        if (t > 0 && t < n_base_) reached(t, true);  // a character read: back inside
    }
    Node& done = nodes_[size_t(id)];
    heap_ += vector_bytes(row);
    done.row = std::move(row);
    done.built = true;
}

std::vector<std::pair<int, int32_t>> JsonEscapes::edges(Kind kind, int level, const Runs& runs) {
    std::vector<std::pair<int, int32_t>> out;
    if (kind == kEscape) {
        Runs units = code_units(runs);
        if (!units.empty()) out.emplace_back('u', hex_digits(units, 0));
        for (const auto& [cp, letter] : kShort) {
            Runs found = clipped(runs, cp, cp, 0);
            if (!found.empty()) out.emplace_back(letter, found[0].target);
        }
    } else if (kind == kLow) {
        Runs leaves;
        for (const Run& r : runs) leaves.push_back({r.lo + 0xDC00, r.hi + 0xDC00, r.target});
        out.emplace_back(kBackslash, node(kU, 0, leaves));
    } else if (kind == kU) {
        out.emplace_back('u', hex_digits(runs, 0));
    } else {  // kHex: the digit at `level` of a code unit
        int64_t size = int64_t(1) << (4 * (3 - level));
        if (runs.size() == 1 && runs[0].lo == 0 && runs[0].hi == 16 * size - 1) {
            int32_t child = runs[0].target;
            if (level < 3) child = hex_digits({{0, size - 1, child}}, level + 1);
            for (int d = 0; d < 16; ++d)
                for (int b : hex_bytes(d)) out.emplace_back(b, child);
            return out;
        }
        std::map<int64_t, Runs> parts;  // digit -> its runs, moved down
        for (const Run& r : runs)
            for (int64_t d = r.lo / size; d <= r.hi / size; ++d) {
                int64_t b0 = d * size;
                parts[d].push_back({std::max(r.lo, b0) - b0, std::min(r.hi, b0 + size - 1) - b0,
                                    r.target});
            }
        for (const auto& [d, part] : parts) {
            int32_t target = level == 3 ? part[0].target : hex_digits(part, level + 1);
            for (int b : hex_bytes(int(d))) out.emplace_back(b, target);
        }
    }
    return out;
}

int32_t JsonEscapes::hex_digits(const Runs& leaves, int level) {
    return node(kHex, level, leaves);
}

int32_t JsonEscapes::low_surrogate(const Runs& runs) { return node(kLow, 0, runs); }

JsonEscapes::Runs JsonEscapes::code_units(const Runs& chars) {
    Runs leaves = clipped(chars, 0, 0xD7FF, 0);
    for (const Run& r : clipped(chars, 0xE000, 0xFFFF, 0)) leaves.push_back(r);
    const Runs astral = clipped(chars, 0x10000, 0x10FFFF, 0);
    for (const Run& r : astral) {
        int64_t first = (r.lo - 0x10000) >> 10, last = (r.hi - 0x10000) >> 10;
        for (int64_t h : {first, last}) {  // blocks the run may share with others
            int64_t lo = 0x10000 + (h << 10);
            Runs block = clipped(astral, lo, lo + 0x3FF, lo);
            leaves.push_back({0xD800 + h, 0xD800 + h, low_surrogate(block)});
        }
        if (last - first > 1)  // the blocks between: wholly this run's
            leaves.push_back(
                {0xD800 + first + 1, 0xD800 + last - 1, low_surrogate({{0, 0x3FF, r.target}})});
    }
    return merged(std::move(leaves));
}

}  // namespace constrain
