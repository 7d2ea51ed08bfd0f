#include "key_check.hpp"

#include <algorithm>
#include <stdexcept>

namespace constrain {
namespace {

// The code point of 4 hex digits at text[i..i+4), or -1.
int32_t hex4(std::string_view text, size_t i) {
    if (i + 4 > text.size()) return -1;
    int32_t value = 0;
    for (size_t k = i; k < i + 4; ++k) {
        char c = text[k];
        int digit = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
        if (digit < 0) return -1;
        value = value * 16 + digit;
    }
    return value;
}

void append_utf8(std::string& out, uint32_t c) {  // surrogates too, as "surrogatepass" does
    if (c < 0x80) {
        out += char(c);
    } else if (c < 0x800) {
        out += char(0xC0 | (c >> 6));
        out += char(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        out += char(0xE0 | (c >> 12));
        out += char(0x80 | ((c >> 6) & 0x3F));
        out += char(0x80 | (c & 0x3F));
    } else {
        out += char(0xF0 | (c >> 18));
        out += char(0x80 | ((c >> 12) & 0x3F));
        out += char(0x80 | ((c >> 6) & 0x3F));
        out += char(0x80 | (c & 0x3F));
    }
}

// The length of the UTF-8 sequence at text[i] (surrogates allowed, as "surrogatepass"
// decodes them), or 0 when the bytes there are not one.
size_t utf8_length(std::string_view text, size_t i) {
    auto at = [&](size_t k) { return k < text.size() ? uint8_t(text[k]) : 0; };
    auto tail = [&](size_t k) { return (at(k) & 0xC0) == 0x80; };
    uint8_t b = at(i);
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return tail(i + 1) ? 2 : 0;
    if (b >= 0xE0 && b <= 0xEF) {
        uint8_t second = at(i + 1);
        if (b == 0xE0 && second < 0xA0) return 0;  // overlong
        return tail(i + 1) && tail(i + 2) ? 3 : 0;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        uint8_t second = at(i + 1);
        if ((b == 0xF0 && second < 0x90) || (b == 0xF4 && second > 0x8F)) return 0;
        return tail(i + 1) && tail(i + 2) && tail(i + 3) ? 4 : 0;
    }
    return 0;
}

void append_u32(std::string& out, size_t n) {
    for (int k = 0; k < 4; ++k) out += char((n >> (8 * k)) & 0xFF);
}

struct AddedKey {
    int64_t frame;
    std::string value;
};

// Scan `n` bytes from `scan` (frames 0..k-1 are `from`'s): false at a repeated key. The keys
// completed on the way are appended to `added`.
bool scan_from(const KeyState& from, KeyScan& scan, const uint8_t* data, size_t n,
               std::vector<AddedKey>& added, std::string& value) {
    const int64_t k = int64_t(from.frames.size());
    auto repeats = [&](int64_t frame, const std::string& text) {
        if (!decode_key(text, value)) return false;  // not a JSON string: repeats nothing
        if (frame < k) {
            const auto& keys = from.frames[size_t(frame)].keys;
            if (keys && keys->contains(value)) return true;
        }
        for (const AddedKey& a : added)
            if (a.frame == frame && a.value == value) return true;
        added.push_back(AddedKey{frame, value});
        return false;
    };
    return scan_keys(scan, data, n, repeats);
}

void start_scan(const KeyState& from, KeyScan& scan) {
    scan.mode = from.mode;
    scan.escaped = from.escaped;
    scan.key = from.text;
    scan.frames.clear();
    for (size_t i = 0; i < from.frames.size(); ++i)
        scan.frames.push_back(JsonFrame{int64_t(i), from.frames[i].is_object});
    scan.next_id = int64_t(from.frames.size());
}

}  // namespace

bool decode_key(std::string_view text, std::string& value) {
    value.clear();
    size_t i = 0;
    const size_t n = text.size();
    while (i < n) {
        uint8_t c = uint8_t(text[i]);
        if (c == '\\') {
            if (i + 1 >= n) return false;
            char e = text[i + 1];
            const char* simple = nullptr;
            switch (e) {
                case '"': simple = "\""; break;
                case '\\': simple = "\\"; break;
                case '/': simple = "/"; break;
                case 'b': simple = "\b"; break;
                case 'f': simple = "\f"; break;
                case 'n': simple = "\n"; break;
                case 'r': simple = "\r"; break;
                case 't': simple = "\t"; break;
                case 'u': break;
                default: return false;
            }
            if (simple) {
                value += simple[0];
                i += 2;
                continue;
            }
            int32_t code = hex4(text, i + 2);
            if (code < 0) return false;
            i += 6;
            // a high surrogate and an escaped low one join (json's scanstring); another escape
            // after it is read on its own
            if (code >= 0xD800 && code <= 0xDBFF && i + 6 <= n && text[i] == '\\' &&
                text[i + 1] == 'u') {
                int32_t low = hex4(text, i + 2);
                if (low < 0) return false;
                if (low >= 0xDC00 && low <= 0xDFFF) {
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                    i += 6;
                }
            }
            append_utf8(value, uint32_t(code));
            continue;
        }
        if (c < 0x20 || c == '"') return false;  // a control byte or quote must be escaped
        size_t length = utf8_length(text, i);
        if (!length) return false;
        value.append(text.substr(i, length));
        i += length;
    }
    return true;
}

std::string spell_key(std::string_view value) {
    static const char hex[] = "0123456789abcdef";
    std::string out = "\"";
    for (char ch : value) {
        uint8_t c = uint8_t(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    out += "\\u00";
                    out += hex[c >> 4];
                    out += hex[c & 0xF];
                } else {
                    out += ch;
                }
        }
    }
    out += '"';
    return out;
}

bool KeySet::contains(std::string_view value) const {
    return std::binary_search(values.begin(), values.end(), value);
}

std::shared_ptr<const KeySet> KeySet::with(const std::string& value) const {
    auto out = std::make_shared<KeySet>();
    size_t at = size_t(std::lower_bound(values.begin(), values.end(), value) - values.begin());
    out->values.reserve(values.size() + 1);
    out->spellings.reserve(values.size() + 1);
    out->values.assign(values.begin(), values.begin() + long(at));
    out->spellings.assign(spellings.begin(), spellings.begin() + long(at));
    out->values.push_back(value);
    out->spellings.push_back(spell_key(value));
    out->values.insert(out->values.end(), values.begin() + long(at), values.end());
    out->spellings.insert(out->spellings.end(), spellings.begin() + long(at), spellings.end());
    return out;
}

const std::string& KeyState::key() const {
    if (!built_key.empty()) return built_key;
    std::string& out = built_key;
    out += char(mode);
    out += char(escaped);
    append_u32(out, text.size());
    out += text;
    for (const KeyFrame& f : frames) {
        if (!f.is_object) {
            out += 'a';
            continue;
        }
        size_t length = 0;
        if (f.keys)
            for (const std::string& v : f.keys->values) length += 4 + v.size();
        out += 'o';
        append_u32(out, length);
        if (f.keys) {
            for (const std::string& v : f.keys->values) {
                append_u32(out, v.size());
                out += v;
            }
        }
    }
    return out;
}

bool KeyState::same_as(const KeyState& other) const {
    if (mode != other.mode || escaped != other.escaped || text != other.text ||
        frames.size() != other.frames.size())
        return false;
    for (size_t i = 0; i < frames.size(); ++i)
        if (frames[i].is_object != other.frames[i].is_object ||
            frames[i].keys != other.frames[i].keys)
            return false;
    return true;
}

bool feed_keys(const KeyState& from, const uint8_t* data, size_t n, KeyState& out) {
    KeyScan scan;
    start_scan(from, scan);
    std::vector<AddedKey> added;
    std::string value;
    if (!scan_from(from, scan, data, n, added, value)) return false;
    out.mode = scan.mode;
    out.escaped = scan.escaped;
    out.text = scan.mode == kKeyString ? scan.key : std::string();
    out.frames.clear();
    for (const JsonFrame& f : scan.frames) {
        KeyFrame frame{f.is_object, nullptr};
        if (f.id < int64_t(from.frames.size())) frame.keys = from.frames[size_t(f.id)].keys;
        for (const AddedKey& a : added) {
            if (a.frame != f.id) continue;
            frame.keys = frame.keys ? frame.keys->with(a.value) : KeySet().with(a.value);
        }
        out.frames.push_back(std::move(frame));
    }
    return true;
}

KeyCheck::KeyCheck(KeyVocabulary vocabulary, bool escapes)
    : vocabulary_(std::move(vocabulary)), escapes_(escapes) {
    if (!vocabulary_.texts) throw std::invalid_argument("the token texts are needed");
    const int64_t size = vocabulary_.size();
    auto check = [&](const std::vector<int64_t>& ids) {
        for (int64_t t : ids)
            if (t < 0 || t >= size) throw std::out_of_range("token id out of range");
    };
    check(vocabulary_.sorted);
    check(vocabulary_.exits);
    check(vocabulary_.exits_or_escapes);
    if (vocabulary_.quotes.size() != 5)
        throw std::invalid_argument("the tokens with 1 to 5 quotes are needed");
    for (const auto& ids : vocabulary_.quotes) check(ids);
    for (size_t i = 1; i < vocabulary_.sorted.size(); ++i)
        if (vocabulary_.text(vocabulary_.sorted[i - 1]) > vocabulary_.text(vocabulary_.sorted[i]))
            throw std::invalid_argument("the sorted tokens are not in byte order");
}

std::pair<size_t, size_t> KeyCheck::with_prefix(std::string_view prefix) const {
    const auto& sorted = vocabulary_.sorted;
    auto lo = std::lower_bound(sorted.begin(), sorted.end(), prefix, [&](int64_t t, auto p) {
        return vocabulary_.text(t) < p;
    });
    auto hi = std::partition_point(lo, sorted.end(), [&](int64_t t) {
        return vocabulary_.text(t).substr(0, prefix.size()) == prefix;
    });
    return {size_t(lo - sorted.begin()), size_t(hi - sorted.begin())};
}

template <class Visit>
void KeyCheck::each_risky(const KeyState& state, Visit&& visit) const {
    // JsonChecks.risky: enough quotes to complete a repeated key; inside a key, only the
    // tokens spelling the rest of an earlier key of its object, or leaving the key and then
    // completing a value
    bool keys = false;
    for (const KeyFrame& f : state.frames) keys = keys || (f.is_object && f.keys);
    int needed = state.mode == kKeyString ? 1 : state.mode == kString ? 3 : 2;
    int n = keys ? needed : needed + 2;
    bool in_string = state.mode == kString || state.mode == kKeyString;
    std::string written = "\"" + state.text;
    bool escaped_key = escapes_ && written.find('\\') != std::string::npos;
    if (n >= 3 || !in_string || state.escaped || escaped_key || state.frames.empty()) {
        for (int64_t t : vocabulary_.quotes[size_t(n - 1)]) visit(t);
        return;
    }
    bool rests = false;
    const auto& top = state.frames.back().keys;
    if (top) {
        for (const std::string& spelling : top->spellings) {
            if (spelling.compare(0, written.size(), written) != 0) continue;
            rests = true;
            auto [lo, hi] = with_prefix(std::string_view(spelling).substr(written.size()));
            for (size_t i = lo; i < hi; ++i) visit(vocabulary_.sorted[i]);
        }
    }
    for (int64_t t : (escapes_ && rests) ? vocabulary_.exits_or_escapes : vocabulary_.exits)
        visit(t);
}

bool KeyCheck::allows(const KeyState& state, int64_t token) const {
    if (token < 0 || token >= vocabulary_.size()) throw std::out_of_range("token id out of range");
    std::string_view data = vocabulary_.text(token);
    if (data.find('"') == std::string_view::npos) return true;  // completes no key
    KeyScan scan;
    start_scan(state, scan);
    std::vector<AddedKey> added;
    std::string value;
    return scan_from(state, scan, reinterpret_cast<const uint8_t*>(data.data()), data.size(),
                     added, value);
}

std::vector<int64_t> KeyCheck::risky(const KeyState& state) const {
    std::vector<int64_t> out;
    each_risky(state, [&](int64_t t) { out.push_back(t); });
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

std::vector<int64_t> KeyCheck::refused(const KeyState& state, const int64_t* tokens,
                                       size_t n) const {
    KeyScan base, scan;
    start_scan(state, base);
    std::vector<AddedKey> added;
    std::string value;
    std::vector<int64_t> out;
    for (size_t i = 0; i < n; ++i) {
        int64_t t = tokens[i];
        if (t < 0 || t >= vocabulary_.size()) throw std::out_of_range("token id out of range");
        std::string_view data = vocabulary_.text(t);
        scan = base;
        added.clear();
        if (!scan_from(state, scan, reinterpret_cast<const uint8_t*>(data.data()), data.size(),
                       added, value))
            out.push_back(t);
    }
    return out;
}

std::vector<int64_t> KeyCheck::refusals(const KeyState& state) const {
    std::vector<int64_t> risky_tokens = risky(state);
    return refused(state, risky_tokens.data(), risky_tokens.size());  // sorted, as they are
}

}  // namespace constrain
