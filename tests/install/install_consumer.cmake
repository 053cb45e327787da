# Script mode: configure paco alone (no tests/examples), install it, build the consumer.
file(REMOVE_RECURSE ${WORK})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()
run(${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/paco-build -G ${GENERATOR}
    -DPACO_BUILD_TESTS=OFF -DPACO_BUILD_EXAMPLES=OFF -DPACO_BUILD_BENCH=OFF
    -DCMAKE_INSTALL_PREFIX=${WORK}/prefix)
run(${CMAKE_COMMAND} --install ${WORK}/paco-build)
if(NOT EXISTS ${WORK}/prefix/include/paco/nn/gpt.hpp)
  message(FATAL_ERROR "install did not place the headers")
endif()
# CONSUMER_CXX: the compiler of the consumer and the examples (tests/install/CMakeLists.txt).
run(${CMAKE_COMMAND} -S ${SOURCE}/tests/install/consumer -B ${WORK}/consumer-build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_COMPILER=${CONSUMER_CXX})
run(${CMAKE_COMMAND} --build ${WORK}/consumer-build)
execute_process(COMMAND ${WORK}/consumer-build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message(STATUS "consumer printed: ${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "loss [0-9]")
  message(FATAL_ERROR "the consumer did not run: rc=${rc} ${out}")
endif()

# Teaching examples build on their own against the installed package too (unoptimised: this
# checks the package, the examples run optimised in the main build's tests): diloco, the one
# docs/examples.md builds this way, and three_levels, a user's own block. custom_router and
# outer_per_level use the same targets and headers and are left to the main build, to keep the
# test command short.
foreach(example diloco three_levels)
  run(${CMAKE_COMMAND} -S ${SOURCE}/examples/${example} -B ${WORK}/example-${example}
      -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_BUILD_TYPE=
      -DCMAKE_CXX_COMPILER=${CONSUMER_CXX})
  run(${CMAKE_COMMAND} --build ${WORK}/example-${example})
  if(NOT EXISTS ${WORK}/example-${example}/example_${example})
    message(FATAL_ERROR "examples/${example} did not build against the installed paco")
  endif()
endforeach()
