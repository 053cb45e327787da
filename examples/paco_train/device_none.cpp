// paco_train built without nvcc: there is no device trainer or device path worker; asking for
// one says why.
#include "device.hpp"

namespace paco_train {

namespace {
paco::error no_cuda() {
  return paco::error(paco::errc::unsupported,
                     "train.device = \"cuda\": this paco_train was built without CUDA (CMake "
                     "found no nvcc); install the CUDA toolkit and rebuild, or use "
                     "train.device = \"cpu\"");
}
}  // namespace

paco::status device_available() {
  return no_cuda();
}

paco::result<std::unique_ptr<device_lm>> make_device_lm(const paco::nn::gpt&,
                                                        const paco::train::inner_config&,
                                                        const paco::io::token_stream&,
                                                        std::uint64_t, const std::string&) {
  return no_cuda();
}

paco::result<std::unique_ptr<device_path_worker>> make_device_path_worker(
    int, const paco::nn::gpt&, std::vector<paco::path::level_span>, std::vector<int>,
    paco::optim::adamw, const paco::train::inner_config&, const paco::io::token_stream&,
    std::uint64_t, const std::string&, const paco::store::compression&) {
  return no_cuda();
}

}  // namespace paco_train
