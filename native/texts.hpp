// A vocabulary's token texts end to end, copied once and shared by the native objects that
// read tokens' bytes (the token steps, the duplicate-key check).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace constrain {

struct TokenTexts {
    std::vector<uint8_t> bytes;
    std::vector<int64_t> offsets{0};  // token t is bytes[offsets[t], offsets[t + 1])
    std::string_view text(int64_t token) const {
        return {reinterpret_cast<const char*>(bytes.data() + offsets[size_t(token)]),
                size_t(offsets[size_t(token) + 1] - offsets[size_t(token)])};
    }
    int64_t size() const { return int64_t(offsets.size()) - 1; }
};

}  // namespace constrain
