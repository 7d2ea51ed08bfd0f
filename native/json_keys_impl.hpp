// The scanner of json_keys.hpp (a template: the callback is inlined where it is used).
#pragma once

namespace constrain {
namespace json_keys_detail {

inline bool is_ws(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }

inline bool ends_scalar(uint8_t b) { return is_ws(b) || b == ',' || b == ']' || b == '}'; }

// A value ended (mode already kAfter): at the top level the document ends.
inline void value_done(KeyScan& s) {
    if (s.frames.empty()) s.mode = kEnd;
}

inline void close(KeyScan& s) {
    if (!s.frames.empty()) s.frames.pop_back();
    s.mode = kAfter;
    value_done(s);
}

inline void open(KeyScan& s, bool is_object) {
    s.frames.push_back(JsonFrame{s.next_id++, is_object});
    s.mode = is_object ? kKey : kValue;
}

// One byte outside strings (checks.py: JsonChecks._byte and _value_start).
inline void byte(KeyScan& s, uint8_t b) {
    if (s.mode == kScalar) {
        if (!ends_scalar(b)) return;
        s.mode = kAfter;
        value_done(s);
    }
    if (is_ws(b)) return;
    switch (s.mode) {
        case kValue:
            if (b == ']') close(s);
            else if (b == '{') open(s, true);
            else if (b == '[') open(s, false);
            else if (b == '"') s.mode = kString;
            else s.mode = kScalar;
            return;
        case kKey:
            if (b == '"') {
                s.mode = kKeyString;
                s.key.clear();
            } else if (b == '}') {
                close(s);
            }
            return;
        case kColon:
            if (b == ':') s.mode = kValue;
            return;
        case kAfter:
            if (b == ',') s.mode = (!s.frames.empty() && s.frames.back().is_object) ? kKey : kValue;
            else if (b == ']' || b == '}') close(s);
            return;
        default:
            return;
    }
}

}  // namespace json_keys_detail

inline size_t closing_quote(const uint8_t* data, size_t n, size_t i) {
    while (i < n) {
        if (data[i] == '"') return i;
        i += data[i] == '\\' ? 2 : 1;
    }
    return n;
}

template <class Repeats>
bool scan_keys(KeyScan& s, const uint8_t* data, size_t n, Repeats&& repeats) {
    size_t i = 0;
    while (i < n) {
        if (s.mode == kString || s.mode == kKeyString) {
            size_t start = s.escaped ? i + 1 : i;  // the byte after a backslash is never a quote
            size_t j = start < n ? closing_quote(data, n, start) : n;
            bool in_key = s.mode == kKeyString;
            if (j >= n) {  // still inside the string, maybe inside an escape
                size_t trailing = 0;
                for (size_t k = n; k > start && data[k - 1] == '\\'; --k) ++trailing;
                if (in_key) s.key.append(reinterpret_cast<const char*>(data + i), n - i);
                s.escaped = start < n && trailing % 2 == 1;
                return true;
            }
            s.escaped = false;
            if (in_key) {
                s.key.append(reinterpret_cast<const char*>(data + i), j - i);
                if (s.frames.empty() || repeats(s.frames.back().id, s.key)) return false;
                s.key.clear();
                s.mode = kColon;
            } else {
                s.mode = kAfter;
                json_keys_detail::value_done(s);
            }
            i = j + 1;
            continue;
        }
        json_keys_detail::byte(s, data[i]);
        ++i;
    }
    return true;
}

}  // namespace constrain
