// Duplicate JSON keys inside one token: the scan of JsonChecks.feed (reference:
// constrain/jsonschema/checks.py) for a check that follows no shapes and validates nothing, so
// the only thing it refuses is a key that repeats one of its object's keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace constrain {

// Scanner modes, numbered as in checks.py.
enum JsonMode : int { kValue, kKey, kColon, kAfter, kString, kKeyString, kScalar, kEnd };

struct JsonFrame {
    int64_t id;      // the caller's frames are 0..k-1; frames opened while scanning count on
    bool is_object;  // an object (keys are checked) or an array
};

struct KeyScan {
    int mode = kValue;
    bool escaped = false;          // the last byte read was an escaping backslash
    std::string key;               // the text of the key in progress (escapes as written)
    std::vector<JsonFrame> frames; // innermost last
    int64_t next_id = 0;           // the id of the next frame opened
};

// Read `n` bytes from `scan`. `repeats(frame_id, key_text)` is asked for each key completed (its
// text as written, between the quotes) and says whether the key repeats one of that frame's
// keys (it also remembers the key). Returns false at the first repeated key.
template <class Repeats>
bool scan_keys(KeyScan& s, const uint8_t* data, size_t n, Repeats&& repeats);

// The index of the first unescaped quote at or after `i`, or n.
size_t closing_quote(const uint8_t* data, size_t n, size_t i);

}  // namespace constrain

#include "json_keys_impl.hpp"
