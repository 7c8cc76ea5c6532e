# Included by scripts/build-llama into llama.cpp's configure (CMAKE_PROJECT_INCLUDE): the sources that run once per
# server start or once per request, outside the decode loop and never numeric, are compiled at -Og instead of
# the build type's -O3: on a 2-core Xeon (shared) these 45 files took 294 of the build's 800 CPU s at -O3 and 191 at
# -Og (docs/timing.md, "make setup from nothing": CPU per file, and llama-server's tokens/s with and without this).
# Untouched, at the build type's optimisation: ggml (every CPU kernel), libllama (model graphs, sampling, vocab,
# grammar), libmtmd, and in common/ and the server everything on the per-token path (sampling, speculative decoding,
# n-gram caches, logging, the slot loop, task results, queues, and the chat output parsers: chat.cpp, peg-parser.cpp,
# chat-peg-parser.cpp and parsers/, which llama-server runs on a streamed chat completion's output once per token).
# libggml*, libllama and libmtmd come out byte for byte the same, and they are all llama-cpp-python loads; llama-server's
# tokens/s was measured the same with the parsers at -Og too (docs/timing.md), but a baseline must be the strongest
# build the product could run, so nothing a token passes through is lowered. A source file named here that a later
# llama.cpp lacks is skipped; a new file stays at -O3.
include_guard(GLOBAL)

function(_workbench_cold_code)
  set(opt "-Og")
  # common/: argument and preset parsing (once at start), model download and cache (off: no curl), chat templates
  # (jinja, once per request), building a model's output parser (once per request), JSON schema to grammar (once per
  # request). The parsers that run on each streamed token (chat.cpp, peg-parser.cpp, chat-peg-parser.cpp,
  # parsers/) stay at -O3.
  set(common arg.cpp preset.cpp download.cpp hf-cache.cpp console.cpp imatrix-loader.cpp subproc.cpp
      chat-auto-parser-generator.cpp chat-auto-parser-helpers.cpp chat-diff-analyzer.cpp
      json-schema-to-grammar.cpp json-schema.cpp)
  file(GLOB parsers RELATIVE "${CMAKE_SOURCE_DIR}/common" "${CMAKE_SOURCE_DIR}/common/jinja/*.cpp")
  # the server: routes and its HTTP layer, the router mode, tools, MCP, schema and chat request conversion.
  set(server_impl server.cpp server-http.cpp server-models.cpp)
  set(server_context server-chat.cpp server-tools.cpp server-mcp.cpp server-schema.cpp)
  set(httplib httplib.cpp)
  foreach(spec "llama-common;common;common;parsers" "llama-server-impl;tools/server;server_impl"
               "server-context;tools/server;server_context" "cpp-httplib;vendor/cpp-httplib;httplib")
    list(POP_FRONT spec target dir)
    if(NOT TARGET ${target})
      continue()
    endif()
    set(files "")
    foreach(var IN LISTS spec)
      foreach(f IN LISTS ${var})
        if(EXISTS "${CMAKE_SOURCE_DIR}/${dir}/${f}")
          list(APPEND files "${CMAKE_SOURCE_DIR}/${dir}/${f}")
        endif()
      endforeach()
    endforeach()
    set_source_files_properties(${files} TARGET_DIRECTORY ${target} PROPERTIES COMPILE_OPTIONS "${opt}")
  endforeach()
endfunction()

# after the whole tree is configured, when every target exists
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _workbench_cold_code)
