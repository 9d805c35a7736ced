int work(const int *a, int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += a[i]; // @util_loop
    return s;
}
