"""What is known about hardware without measuring it: datasheet figures (``datasheet``),
the physical bounds no measurement can exceed (``physical``) and NVIDIA's clock-event
reasons (``throttle``). Pure data and arithmetic: no torch, nothing measured."""
