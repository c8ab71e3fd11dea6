// Writing output files safely: an early check that a path can be written (so a long run does not
// end in "directory does not exist"), and an atomic replacement that never follows a planted link,
// keeps an existing file's mode, is durable once it returns, and leaves nothing behind on error.
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace swapffn {

// Throws naming the problem unless a file can be created or replaced at path: the path is not
// empty and not a directory, and its directory exists, is a directory and is writable.
void check_writable(const std::string& path);

// Replaces path with the concatenation of parts. The bytes go to an unnamed file in path's
// directory (O_TMPFILE; where the filesystem lacks it, a new file `.<name>.tmp-<random>` opened
// with O_EXCL|O_NOFOLLOW), which is fsynced, given the mode of the file it replaces (a new file
// gets 0666 minus the umask), renamed over path, and the directory fsynced. A symlink at path is
// replaced, never followed. On error, path is as it was and no temporary file remains.
void write_file_atomically(const std::string& path, std::span<const std::span<const std::byte>> parts);
void write_file_atomically(const std::string& path, std::string_view text);

}  // namespace swapffn
