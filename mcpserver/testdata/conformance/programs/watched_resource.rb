"watched resource"
