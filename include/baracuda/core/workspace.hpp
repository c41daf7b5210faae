#pragma once
#include <cstddef>

namespace baracuda {
/// Scratch memory the caller provides to run(); plans report how much they need with
/// workspace_size(). A plan whose size is 0 accepts an empty Workspace.
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};
}  // namespace baracuda
