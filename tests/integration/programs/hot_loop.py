def spin(n):
    total = 0
    for i in range(n):  # SPIN
        total += i * i % 7  # SPIN
    return total


def light():
    return sum(range(1000))


if __name__ == "__main__":
    light()
    print(spin(3_000_000))
