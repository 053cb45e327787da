// paco_train built without nvcc: the LM job has no device trainer; asking for one says why.
#include "device_lm.hpp"

namespace paco_train {

paco::result<std::unique_ptr<device_lm>> make_device_lm(const paco::nn::gpt&,
                                                        const paco::train::inner_config&,
                                                        const paco::io::token_stream&,
                                                        std::uint64_t, const std::string&) {
  return paco::error(paco::errc::unsupported,
                     "train.device = \"cuda\": this paco_train was built without CUDA (CMake "
                     "found no nvcc); install the CUDA toolkit and rebuild, or use "
                     "train.device = \"cpu\"");
}

}  // namespace paco_train
