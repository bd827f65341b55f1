# The layering rules, enforced by the build (docs/architecture.md, "Layers").
#
# ringtrain_layer(TARGET DIRS dir... ALLOW prefix... [NO_TORCH])
#   Every .h/.cc directly in DIRS (relative to the source root) may include project headers only
#   from the ALLOW prefixes ("worker/engine/model", "common/"); with NO_TORCH, also no LibTorch
#   header (<torch/…>, <ATen/…>, <c10/…>, <caffe2/…>). Third-party headers ("absl/…", <…>) are
#   always allowed. Checked by cmake/check_includes.cmake before TARGET builds, and again
#   whenever one of the files changes.
#
# ringtrain_check_engine_links(ENGINE lib... USERS target... TEST_DIR dir)
#   Fails the configure when a target other than USERS, the ENGINE libraries themselves and the
#   targets defined under TEST_DIR (a source folder added with add_subdirectory, or empty) links an
#   ENGINE library.

set(RINGTRAIN_LAYERING_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/check_includes.cmake)

function(ringtrain_layer target)
  cmake_parse_arguments(L "NO_TORCH" "" "DIRS;ALLOW" ${ARGN})
  set(files)
  foreach(dir ${L_DIRS})
    file(GLOB found CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${dir}/*.h ${CMAKE_SOURCE_DIR}/${dir}/*.cc)
    list(APPEND files ${found})
  endforeach()
  string(MAKE_C_IDENTIFIER "${target}_${L_DIRS}" name)
  set(list_file ${CMAKE_BINARY_DIR}/layering/${name}.files)
  set(stamp ${CMAKE_BINARY_DIR}/layering/${name}.ok)
  string(REPLACE ";" "\n" lines "${files}")
  file(WRITE ${list_file} "${lines}\n")
  add_custom_command(
    OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DFILE_LIST=${list_file} -DSOURCE_DIR=${CMAKE_SOURCE_DIR}
            "-DALLOW=${L_ALLOW}" -DNO_TORCH=${L_NO_TORCH} "-DLAYER=${L_DIRS}"
            -P ${RINGTRAIN_LAYERING_SCRIPT}
    COMMAND ${CMAKE_COMMAND} -E touch ${stamp}
    DEPENDS ${files} ${list_file} ${RINGTRAIN_LAYERING_SCRIPT}
    COMMENT "Checking the includes of ${L_DIRS}"
    VERBATIM)
  add_custom_target(${name}_layering DEPENDS ${stamp})
  add_dependencies(${target} ${name}_layering)
endfunction()

# Every buildsystem target defined in `dir` and below.
function(ringtrain_targets_under dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    ringtrain_targets_under(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(ringtrain_check_engine_links)
  cmake_parse_arguments(L "" "TEST_DIR" "ENGINE;USERS" ${ARGN})
  ringtrain_targets_under(${CMAKE_SOURCE_DIR} all)
  set(tests)
  if(L_TEST_DIR)
    ringtrain_targets_under(${L_TEST_DIR} tests)
  endif()
  foreach(t ${all})
    if(t IN_LIST L_ENGINE OR t IN_LIST L_USERS OR t IN_LIST tests)
      continue()
    endif()
    get_target_property(links ${t} LINK_LIBRARIES)
    get_target_property(interface_links ${t} INTERFACE_LINK_LIBRARIES)
    foreach(lib ${links} ${interface_links})
      if(lib IN_LIST L_ENGINE)
        message(FATAL_ERROR "layering: ${t} links the engine library ${lib}; only "
                            "${L_USERS} and the tests may (docs/architecture.md, \"Layers\")")
      endif()
    endforeach()
  endforeach()
endfunction()
