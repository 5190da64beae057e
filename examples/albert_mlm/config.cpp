#include "config.hpp"

#include <stdexcept>

namespace albert {

AlbertConfig AlbertConfig::preset(const std::string& name) {
  AlbertConfig c;
  c.name = name;
  if (name == "tiny") {
    c.hidden_size = 128;
    c.num_layers = 4;
    c.num_heads = 2;
    c.intermediate_size = 512;
    c.max_positions = 256;
  } else if (name == "base") {
    // the defaults above
  } else if (name == "large") {
    c.hidden_size = 1024;
    c.num_layers = 24;
    c.num_heads = 16;
    c.intermediate_size = 4096;
  } else {
    throw std::invalid_argument("unknown ALBERT config '" + name + "' (tiny, base or large)");
  }
  return c;
}

}  // namespace albert
