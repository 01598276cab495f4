// Force-included into every C++ translation unit (see the top-level CMakeLists.txt).
// C's stdio.h declares a global function `void rewind(FILE*)`, and C++ forbids a function and a
// namespace of the same name in one scope, so `namespace rewind` clashes with every TU that
// includes <cstdio> (libstdc++'s <string> does). Here stdio.h is read with that one function
// renamed, and <cstdio>'s std:: names are declared without it (libstdc++'s <cstdio> is skipped
// through its include guard, since it re-exports ::rewind unconditionally). Nothing in rewind
// calls C's rewind(); std::fseek(f, 0, SEEK_SET) does the same.
#pragma once
#ifdef __cplusplus
#define rewind rewind_c_stdio_function
#include <stdio.h>
#undef rewind
#if __has_include(<bits/c++config.h>) && !defined(_GLIBCXX_CSTDIO)
#include <bits/c++config.h>
#include <cstddef>
#define _GLIBCXX_CSTDIO 1
namespace std {
using ::FILE;
using ::fpos_t;
using ::clearerr;
using ::fclose;
using ::feof;
using ::ferror;
using ::fflush;
using ::fgetc;
using ::fgetpos;
using ::fgets;
using ::fopen;
using ::fprintf;
using ::fputc;
using ::fputs;
using ::fread;
using ::freopen;
using ::fscanf;
using ::fseek;
using ::fsetpos;
using ::ftell;
using ::fwrite;
using ::getc;
using ::getchar;
using ::perror;
using ::printf;
using ::putc;
using ::putchar;
using ::puts;
using ::remove;
using ::rename;
using ::scanf;
using ::setbuf;
using ::setvbuf;
using ::sprintf;
using ::sscanf;
using ::tmpfile;
using ::tmpnam;
using ::ungetc;
using ::vfprintf;
using ::vprintf;
using ::vsprintf;
using ::snprintf;
using ::vfscanf;
using ::vscanf;
using ::vsnprintf;
using ::vsscanf;
} // namespace std
#endif
#endif
