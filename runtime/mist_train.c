// mist-train: placeholder main until the launcher lands.
#include <stdio.h>
int main(void) { puts("mist-train"); return 0; }
