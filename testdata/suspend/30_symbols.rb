echo(:sym, [:a, {b: :c}])
