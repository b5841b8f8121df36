# cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed_file.cmake
# Writes a C file defining `const unsigned char NAME[]` (the bytes of IN) and
# `const size_t NAME_size`, so data travels inside the library instead of next to it.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
# 32 bytes a line keeps the generated file readable in a debugger and diff tools.
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){32})" "\\1\n" body "${body}")
file(WRITE "${OUT}" "/* generated from ${IN} by scripts/embed_file.cmake: do not edit */\n"
  "#include <stddef.h>\n"
  "extern const unsigned char ${NAME}[];\n"
  "extern const size_t ${NAME}_size;\n"
  "const unsigned char ${NAME}[${bytes}] = {\n${body}\n};\n"
  "const size_t ${NAME}_size = ${bytes};\n")
