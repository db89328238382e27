from torchmark.cli import main

main()
