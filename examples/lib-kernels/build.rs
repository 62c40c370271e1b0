fn main() {
    ktune_build::tune_crate();
}
