// Reading input files safely: only regular files (a FIFO or device never blocks the reader), read
// whole into memory (a file truncated while it is read is an error, never a SIGBUS of a mapping),
// and paths that say what they mean (no NUL byte cutting them short).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace swapffn {

// Throws "<what>: ..." when path is empty or holds a NUL byte (the system would cut it there).
void check_path(const std::string& path, const std::string& what);

// The bytes of the regular file at path. Throws "<what>: ..." naming the problem when it cannot be
// opened, is not a regular file (opened without blocking, so a FIFO is refused, not waited on), is
// larger than max_bytes, or changes size while it is read.
std::vector<std::byte> read_regular_file(const std::string& path, const std::string& what, size_t max_bytes);

// True when a and b name the same existing file (device and inode), or, where either does not
// exist yet, the same normalised path: an output that would overwrite an input.
bool same_file(const std::string& a, const std::string& b);

}  // namespace swapffn
