//! Exports `run(string) -> string`, not the ax world's `run`: upload must refuse it.
wit_bindgen::generate!({ path: "wit", world: "wrong" });

struct Wrong;

impl Guest for Wrong {
    fn run(input: String) -> String {
        input
    }
}

export!(Wrong);
